import Foundation
import NearbyMessages
import Testing
import TestSupport

/// Runs `body` with a fresh cluster and stops every process afterwards; on
/// failure the programs' output is printed with the error.
func withCluster(_ options: Cluster.Options = Cluster.Options(),
                 isolation: isolated (any Actor)? = #isolation,
                 _ body: (Cluster) async throws -> Void) async throws {
    let cluster = try await Cluster(options: options)
    do {
        try await body(cluster)
    } catch {
        print(cluster.logs)
        await cluster.stop()
        throw error
    }
    await cluster.stop()
}

/// What a subscription reported, in order.
struct Event: Sendable, Equatable, CustomStringConvertible {
    enum Kind: String, Sendable {
        case found, lost, expired
        /// DistanceChanged (`value`: metres) and BleSignalChanged (`value`: RSSI).
        case distance, signal
    }

    let kind: Kind
    let message: Message?
    let info: MessageInfo?
    var value: Double?

    var text: String? { message.flatMap { String(data: $0.content, encoding: .utf8) } }

    var description: String { "\(kind) \(message.map { "\($0.namespace)/\($0.type) '\(String(decoding: $0.content, as: UTF8.self))'" } ?? "")" }
}

/// A subscription and everything it has reported.
struct RecordedSubscription: Sendable {
    let subscription: Subscription
    let events: Inbox<Event>

    /// Waits for a found (or lost) of the message whose content is `text`.
    @discardableResult
    func wait(_ kind: Event.Kind, _ text: String, within seconds: Double = 15) async throws -> Event {
        try await events.first(within: seconds, "\(kind) '\(text)'") { $0.kind == kind && $0.text == text }
    }

    var kinds: [String] { events.values.map(\.description) }
}

extension MessageManager {
    /// A manager on one device of the cluster.
    convenience init(_ device: Cluster.Device, apiKey: String,
                     errorStateChanged: @escaping @Sendable (ErrorState) -> Void = { _ in }) async throws {
        try await self.init(apiKey: apiKey, bus: .address(device.busAddress), errorStateChanged: errorStateChanged)
    }

    func publish(_ text: String, type: String = "chat", namespace: String = "", strategy: Strategy? = nil,
                 expired: @escaping @Sendable () -> Void = {},
                 statusChanged: @escaping @Sendable (String) -> Void = { _ in }) async throws -> Publication {
        try await publication(of: Message(content: Data(text.utf8), namespace: namespace, type: type), strategy: strategy,
                              expired: expired, statusChanged: statusChanged)
    }

    func record(namespace: String = "", type: String = "", strategy: Strategy? = nil,
                deviceTypes: DeviceTypes = .nearby, beaconStrategy: BeaconStrategy? = nil,
                statusChanged: @escaping @Sendable (String) -> Void = { _ in }) async throws -> RecordedSubscription {
        let events = Inbox<Event>()
        let subscription = try await subscription(
            namespace: namespace, type: type, strategy: strategy, deviceTypes: deviceTypes, beaconStrategy: beaconStrategy,
            messageFound: { events.put(Event(kind: .found, message: $0, info: $1)) },
            messageLost: { events.put(Event(kind: .lost, message: $0, info: $1)) },
            distanceChanged: { message, meters, _ in events.put(Event(kind: .distance, message: message, info: nil, value: meters)) },
            bleSignalChanged: { message, rssi, _ in events.put(Event(kind: .signal, message: message, info: nil, value: Double(rssi))) },
            expired: { events.put(Event(kind: .expired, message: nil, info: nil)) }, statusChanged: statusChanged)
        return RecordedSubscription(subscription: subscription, events: events)
    }
}
