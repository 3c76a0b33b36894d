import Foundation
import Logging
import ServerAPI

/// What one replica's ``ConnectionHub`` tells the others': the hubs share
/// storage, not their sessions and channels, so each says what the others'
/// sessions and channels may need to act on.
enum ConnectionEvent: Codable, Sendable, Equatable {
    /// Something for the project's application servers was stored or given
    /// back, and this replica did not hand it all out: replicas with
    /// sessions of the project try to claim it.
    case waiting(project: String)
    /// An event for the device's channel, which is not open on this replica.
    case tell(device: String, ChannelEvent)
    /// The device has downstream messages in storage that were too large to
    /// tell on the bus: the replica holding its channel gives it, from
    /// storage, what it has not been given.
    case downstreamWaiting(device: String)
}

/// The hubs' events over a ``ReplicaBus`` of their own. They are hints: a
/// replica that misses some (its bus away) catches up from storage when it
/// joins again, and leases on claims make up for a replica that died.
final class ConnectionEventFeed: Sendable {
    /// What the feed hands its hub.
    enum Delivery: Sendable {
        /// The bus (re)joined: what was published while it was away is lost.
        case joined
        /// Another replica's event.
        case event(ConnectionEvent)
    }

    private struct Envelope: Codable {
        var replica: String
        var event: ConnectionEvent
    }

    private let bus: any ReplicaBus
    private let replica: String
    private let logger: Logger
    private let listening: Task<Void, Never>

    /// Listens on `bus` until the feed goes, handing `receive` every other
    /// replica's event (a replica acts on its own events itself).
    init(bus: any ReplicaBus, replica: String, logger: Logger,
         receive: @escaping @Sendable (Delivery) async -> Void) {
        self.bus = bus
        self.replica = replica
        self.logger = logger
        listening = Task {
            await bus.listen { delivery in
                switch delivery {
                case .joined:
                    await receive(.joined)
                case .left:
                    break
                case .message(let text):
                    guard let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)) else {
                        logger.warning("a connection event from another replica was not understood: a replica of another version?",
                                       metadata: ["bytes": "\(text.utf8.count)"])
                        return
                    }
                    if envelope.replica != replica { await receive(.event(envelope.event)) }
                }
            }
        }
    }

    deinit {
        listening.cancel()
    }

    /// Sends `event` to the other replicas. A failure is logged, not thrown:
    /// what the event was about is in storage, where the others find it at
    /// their next look (their leases' renewal, or their next join).
    func publish(_ event: ConnectionEvent) async {
        do {
            var text = try encoded(event)
            // A downstream message is in storage already: one too large for a
            // notification is read from there by the replica holding the
            // channel, not stored a second time for the bus (PostgreSQL's
            // `replicaMessage`, outside every quota). A TTL 0 message told so
            // may be swept as expired before it is read.
            if text.utf8.count > bus.packedBytes, case .tell(let device, .message) = event {
                text = try encoded(.downstreamWaiting(device: device))
            }
            try await bus.publish(text)
        } catch {
            logger.warning("a connection event could not be sent to the other replicas", metadata: ["reason": "\(error)"])
        }
    }

    private func encoded(_ event: ConnectionEvent) throws -> String {
        String(decoding: try JSONEncoder().encode(Envelope(replica: replica, event: event)), as: UTF8.self)
    }
}
