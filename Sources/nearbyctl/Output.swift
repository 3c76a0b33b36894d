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

    /// A found or lost message. A found one says how it was heard: over BLE
    /// the signal strength in dBm, over audio the burst's level in dBFS, and
    /// the estimated distance. A lost one was not heard for a while, so it
    /// gives no reading (the last one, from before it went, would mislead).
    func message(_ event: String, _ message: Message, _ info: MessageInfo) {
        let text = String(data: message.content, encoding: .utf8)
        var fields: [String: any Sendable] = [
            "event": event, "namespace": message.namespace, "type": message.type,
            "content": message.content.base64EncodedString(), "medium": info.medium,
        ]
        if event != "lost" {
            fields["rssi"] = info.rssi
            fields["distance"] = info.distanceMeters
        }
        if let text { fields["text"] = text }
        let shown: TerminalText = text.map { "'\($0)'" } ?? "base64:\(message.content.base64EncodedString())"
        var human: TerminalText = "\(event.padding(toLength: 5, withPad: " ", startingAt: 0)) \(message.namespace)/\(message.type)"
            + " \(info.medium)"
        if event != "lost" {
            let reading = info.medium == "audio" ? "level=\(info.rssi)dBFS" : "rssi=\(info.rssi)dBm"
            human += " \(reading) distance=\(String(format: "%.1f", info.distanceMeters))m"
        }
        self.event(fields, human: human + " \(shown)")
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

/// Says why a publication or subscription waits (its `StatusReason`), so a
/// command that seems to do nothing tells why: once it has waited a moment
/// (a brief `starting` is how every object begins), then at each new reason,
/// and `active` when it no longer waits.
final class WaitReporter: Sendable {
    private struct State {
        var status = ""
        var reason = ""
        /// A reason was printed, and `active` has not been since.
        var told = false
        var patient = true
    }

    private let output: Output
    private let state = Mutex(State())
    /// How long an object may be `starting` before the reason is printed.
    static let patience = Duration.seconds(2)

    init(output: Output) {
        self.output = output
    }

    /// The object's status and reason as it began; starts the patience.
    func begin(status: String, reason: String) {
        state.withLock { state in
            if state.status.isEmpty { state.status = status }
            if state.reason.isEmpty { state.reason = reason }
        }
        Task {
            try? await Task.sleep(for: Self.patience)
            state.withLock { $0.patient = false }
            tell()
        }
    }

    func statusChanged(_ status: String) {
        state.withLock { $0.status = status }
        tell()
    }

    func reasonChanged(_ reason: String) {
        state.withLock { $0.reason = reason }
        tell()
    }

    private func tell() {
        let line: (fields: [String: any Sendable], human: TerminalText)? = state.withLock { state in
            guard !state.patient else { return nil }
            if state.status == "active" || state.reason.isEmpty {
                guard state.told else { return nil }
                state.told = false
                return (["event": "active"], "active")
            }
            state.told = true
            return (["event": "waiting", "status": state.status, "reason": state.reason], "waiting (\(state.status)): \(state.reason)")
        }
        if let line { output.event(line.fields, human: line.human) }
    }
}