import Foundation
import NearbyCore
import ServerAPI
import Synchronization

/// What the generator keeps of one simulated device.
struct DeviceState {
    let index: Int
    var id: String?
    var secret: String?
    var token: Token?
    /// The replica serving the device (the others redirect its requests
    /// there, 307), as nearbyd keeps it: its requests, stream and channel go there.
    var home: String?
    /// The device's open stream, and how the last one ended (nil while open).
    var stream: WebSocketConnection?
    var streamClosed: Int?
    var channel: WebSocketConnection?
    /// The moving devices (by index) whose tokens the device hears now.
    var neighbours: [Int] = []
    var random: SplitMix64
    /// Neighbour index → when the report that added it was sent, while latencies are taken.
    var pending: [Int: ContinuousClock.Instant] = [:]
    /// Whether one of its reports is out: a device's reports go in order.
    var busy = false
    /// Upstream message id → when it was sent, until its verdict comes.
    var upstreamOut: [String: ContinuousClock.Instant] = [:]
    /// Kept across runs: a message id the server has seen before would be answered with its old verdict.
    var upstreamSequence = 0

    init(index: Int, seed: Int) {
        self.index = index
        random = SplitMix64(seed: UInt64(seed) &* 1_000_003 &+ UInt64(index))
    }

    var authorization: (String, String) { ("Authorization", "Bearer \(secret ?? "")") }

    var streamIsOpen: Bool { stream != nil && streamClosed == nil }
}

/// Counts by name (outcomes, statuses, stream events), as the benchmark reads them.
struct Counts {
    private(set) var values: [String: Int] = [:]

    mutating func add(_ name: String, _ count: Int = 1) {
        values[name, default: 0] += count
    }

    subscript(_ name: String) -> Int { values[name] ?? 0 }

    /// The counts whose names start with `prefix`, the prefix taken off.
    func with(prefix: String) -> [String: Int] {
        var found: [String: Int] = [:]
        for (name, count) in values where name.hasPrefix(prefix) { found[String(name.dropFirst(prefix.count))] = count }
        return found
    }

    /// These counts less `earlier`'s, those that did not change left out.
    static func - (later: Counts, earlier: Counts) -> [String: Int] {
        var difference: [String: Int] = [:]
        for (name, count) in later.values where count != earlier[name] { difference[name] = count - earlier[name] }
        return difference
    }
}

/// Counts that several tasks add to at once (a command's outcomes).
final class SharedCounts: Sendable {
    private let counts = Mutex(Counts())

    func add(_ name: String) {
        counts.withLock { $0.add(name) }
    }

    var values: [String: Int] { counts.withLock { $0.values } }
}
