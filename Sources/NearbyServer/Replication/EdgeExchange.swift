import Foundation
import Logging

/// Carries the matchers' edge copies (``EdgeMessage``) from replica to
/// replica over PostgreSQL's LISTEN/NOTIFY: each replica listens on a
/// channel of its own (``channel(of:)``), and a message goes to the one
/// replica it is for, not to all. What a matcher sends while the previous
/// messages are being sent, and for ``linger`` before, goes together in the
/// next (``GroupCommit``): one notification to each replica for many changes. Messages from one replica
/// to another arrive in the order they were sent, which the copies rely on
/// (a put, then its remove).
///
/// A message that could not be sent is lost: its copy is made again when
/// the edge changes, when the receiving replica asks for its partitions'
/// edges (taking partitions, or listening again after a break), or is
/// dropped when its home is seen dead.
final class EdgeExchange: Sendable {
    /// A replica's channel. Replica ids are URL-safe base64: a channel name as they are.
    static func channel(of replica: String) -> String { "nearby_edges_" + replica }

    private let outbox: GroupCommit<Outgoing, Void>
    private let listening: Task<Void, Never>

    private struct Outgoing: Sendable {
        var to: String
        var message: EdgeMessage
    }

    /// Listens on this replica's channel, handing what arrives to `matcher`;
    /// `joined` is called each time the listening (re)starts, when what was
    /// sent meanwhile is lost to it.
    init(storage: PostgresStorage, matcher: Matcher, logger: Logger, joined: @escaping @Sendable () async -> Void) {
        let replica = matcher.replica
        outbox = GroupCommit { batch in
            // What the matcher sends meanwhile goes in the same notifications: a notification is a transaction
            // of PostgreSQL's and a wake-up of the receiver's, and under load one then carries many copies.
            try? await Task.sleep(for: Self.linger)
            return try await Self.send(batch, from: replica, storage: storage, logger: logger)
        }
        let bus = PostgresReplicaBus(storage: storage, channel: Self.channel(of: replica), logger: logger)
        listening = Task {
            await bus.listen { delivery in
                switch delivery {
                case .joined:
                    await joined()
                case .left:
                    break
                case .message(let text):
                    guard let letter = try? JSONDecoder().decode(EdgeLetter.self, from: Data(text.utf8)) else {
                        logger.warning("an edge message from another replica was not understood (a replica of another version?)",
                                       metadata: ["bytes": "\(text.utf8.count)"])
                        return
                    }
                    await matcher.receive(letter)
                }
            }
        }
    }

    deinit {
        listening.cancel()
    }

    /// Queues `message` for `replica`. Does not wait: the matcher calls it.
    func send(to replica: String, _ message: EdgeMessage) {
        _ = outbox.enqueue(Outgoing(to: replica, message: message))
    }

    /// Sends `message` to each of `replicas`; returns once it is sent, or
    /// could not be (logged).
    func sendNow(_ message: EdgeMessage, to replicas: Set<String>) async {
        let pending = replicas.sorted().map { outbox.enqueue(Outgoing(to: $0, message: message)) }
        for item in pending { _ = try? await item.result() }
    }

    /// How long a batch of copies waits for more before it is sent: what a
    /// copy adds to a found on another replica, at most.
    static let linger = Duration.milliseconds(5)

    /// Edges in one message at most: 40 copies are about 4.5 KB of JSON.
    static let edgesPerMessage = 40

    /// The messages for one replica in letters that each fit a
    /// notification (``PostgresReplicaBus/inlineBytes``), none kept in
    /// `replicaMessage`: long puts and removes in parts, a long sync as a
    /// sync of its first edges and puts of the rest (in order, the same).
    static func letters(from replica: String, _ messages: [EdgeMessage],
                        maximumBytes: Int = PostgresReplicaBus.inlineBytes) throws -> [String] {
        func parts<T>(_ items: [T]) -> [[T]] {
            stride(from: 0, to: max(items.count, 1), by: edgesPerMessage).map { Array(items[$0..<min($0 + edgesPerMessage, items.count)]) }
        }
        var small: [EdgeMessage] = []
        for message in messages {
            switch message {
            case .put(let copies): small += parts(copies).map { .put($0) }
            case .remove(let keys): small += parts(keys).map { .remove($0) }
            case .sync(let partitions, let edges):
                let pieces = parts(edges)
                small.append(.sync(partitions: partitions, edges: pieces[0]))
                small += pieces.dropFirst().map { .put($0) }
            case .bequest(let edges): small += parts(edges).map { .bequest($0) }
            }
        }
        // An EdgeLetter's JSON, written around its messages' so that each is encoded once.
        let encoder = JSONEncoder()
        let head = "{\"from\":" + String(decoding: try encoder.encode(replica), as: UTF8.self) + ",\"messages\":["
        let tail = "]}"
        var letters: [String] = []
        var packed: [String] = []
        var bytes = head.utf8.count + tail.utf8.count
        for message in small {
            let text = String(decoding: try encoder.encode(message), as: UTF8.self)
            let more = text.utf8.count + (packed.isEmpty ? 0 : 1)
            if bytes + more > maximumBytes && !packed.isEmpty {
                letters.append(head + packed.joined(separator: ",") + tail)
                packed = []
                bytes = head.utf8.count + tail.utf8.count
            }
            bytes += text.utf8.count + (packed.isEmpty ? 0 : 1)
            packed.append(text)
        }
        if !packed.isEmpty { letters.append(head + packed.joined(separator: ",") + tail) }
        return letters
    }

    /// Letters to each replica the batch is for, its messages in order.
    private static func send(_ batch: [Outgoing], from replica: String, storage: PostgresStorage,
                             logger: Logger) async throws -> [Result<Void, any Error>] {
        var letters: [String: [EdgeMessage]] = [:]
        for item in batch { letters[item.to, default: []].append(item.message) }
        var failed: [String: any Error] = [:]
        for (to, messages) in letters.sorted(by: { $0.key < $1.key }) {
            do {
                let bus = PostgresReplicaBus(storage: storage, channel: channel(of: to), logger: logger)
                for text in try Self.letters(from: replica, messages) { try await bus.publish(text) }
            } catch {
                failed[to] = error
                logger.warning("edge copies could not be sent to a replica: \(PostgresStorage.reason(error))",
                               metadata: ["to": "\(to)", "messages": "\(messages.count)"])
            }
        }
        return batch.map { item in failed[item.to].map { .failure($0) } ?? .success(()) }
    }
}
