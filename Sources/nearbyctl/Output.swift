import Foundation
import NearbyMessages
import Synchronization

/// Prints events as text lines for people or JSON lines for scripts.
struct Output: Sendable {
    let json: Bool

    func event(_ fields: [String: any Sendable], human: String) {
        write(json ? Self.jsonLine(fields) : human)
    }

    func message(_ event: String, _ message: Message, _ info: MessageInfo) {
        let text = String(data: message.content, encoding: .utf8)
        var fields: [String: any Sendable] = [
            "event": event, "namespace": message.namespace, "type": message.type,
            "content": message.content.base64EncodedString(), "medium": info.medium, "rssi": info.rssi,
            "distance": info.distanceMeters,
        ]
        if let text { fields["text"] = text }
        let shown = text.map { "'\($0)'" } ?? "base64:" + message.content.base64EncodedString()
        let human = "\(event.padding(toLength: 5, withPad: " ", startingAt: 0)) \(message.namespace)/\(message.type)"
            + " \(info.medium) rssi=\(info.rssi) distance=\(String(format: "%.1f", info.distanceMeters))m \(shown)"
        self.event(fields, human: human)
    }

    func failure(_ text: String) {
        FileHandle.standardError.write(Data("nearbyctl: \(text)\n".utf8))
    }

    private func write(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private static func jsonLine(_ fields: [String: any Sendable]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}

/// Counts events across the handler's calls.
final class Counter: Sendable {
    private let value = Mutex(0)

    func increment() -> Int {
        value.withLock { count in
            count += 1
            return count
        }
    }
}

