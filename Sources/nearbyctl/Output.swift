import Foundation
import NearbyMessages
import Synchronization

/// Prints events as text lines for people (values escaped, see
/// ``TerminalText``) or JSON lines for scripts (values exact).
struct Output: Sendable {
    let json: Bool

    func event(_ fields: [String: any Sendable], human: TerminalText) {
        write(json ? Self.jsonLine(fields) : human.rendered)
    }

    func message(_ event: String, _ message: Message, _ info: MessageInfo) {
        let text = String(data: message.content, encoding: .utf8)
        var fields: [String: any Sendable] = [
            "event": event, "namespace": message.namespace, "type": message.type,
            "content": message.content.base64EncodedString(), "medium": info.medium, "rssi": info.rssi,
            "distance": info.distanceMeters,
        ]
        if let text { fields["text"] = text }
        let shown: TerminalText = text.map { "'\($0)'" } ?? "base64:\(message.content.base64EncodedString())"
        let human: TerminalText = "\(event.padding(toLength: 5, withPad: " ", startingAt: 0)) \(message.namespace)/\(message.type)"
            + " \(info.medium) rssi=\(info.rssi) distance=\(String(format: "%.1f", info.distanceMeters))m \(shown)"
        self.event(fields, human: human)
    }

    /// A failure or warning on standard error, which is a terminal too.
    func failure(_ text: TerminalText) {
        FileHandle.standardError.write(Data("nearbyctl: \(text.rendered)\n".utf8))
    }

    private func write(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private static func jsonLine(_ fields: [String: any Sendable]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}

/// Ends a command after `limit` printed events (`--count`), or never: the
/// handlers run on the bus thread, the command waits on ``ended``.
final class EventLimit: Sendable {
    let ended: AsyncStream<Void>
    private let sink: AsyncStream<Void>.Continuation
    private let limit: Int?
    private let printed = Mutex(0)

    init(_ limit: Int?) {
        self.limit = limit
        (ended, sink) = AsyncStream.makeStream(of: Void.self)
    }

    /// Counts one printed event.
    func count() {
        guard let limit else { return }
        if printed.withLock({ count in
            count += 1
            return count
        }) >= limit { sink.finish() }
    }

    /// Ends the command now (the subscription expired).
    func end() { sink.finish() }
}
