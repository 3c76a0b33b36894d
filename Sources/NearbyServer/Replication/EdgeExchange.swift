import Foundation
import Logging
import Synchronization

/// Carries the matchers' edge copies (``EdgeMessage``) from replica to
/// replica over PostgreSQL's LISTEN/NOTIFY: each replica listens on a
/// channel of its own (``channel(of:)``), and a message goes to the one
/// replica it is for, not to all. What a matcher sends while the previous
/// messages are being sent, and for ``linger`` before, goes together in the
/// next (``GroupCommit``): one notification to each replica for many changes. Messages from one replica
/// to another arrive in the order they were sent, which the copies rely on
/// (a put, then its remove).
///
/// A message that could not be sent is lost, and what its replica holds of
/// this one's edges may be behind for good (an edge only refreshed is
/// never copied again): once sending to that replica fails, it is sent
/// every edge it should hold from here, in place of what it holds
/// (``Matcher/resendEdges(to:)``), after ``repairDelay``, doubled while it
/// keeps failing up to ``maximumRepairDelay``. It is also sent them when it
/// asks (taking partitions, or listening again after a break), and drops
/// them when this replica is seen dead.
final class EdgeExchange: Sendable {
    /// A replica's channel. Replica ids are URL-safe base64: a channel name as they are.
    static func channel(of replica: String) -> String { "nearby_edges_" + replica }

    private let outbox: GroupCommit<Outgoing, Void>
    private let listening: Task<Void, Never>
    private let repairs: Repairs

    private struct Outgoing: Sendable {
        var to: String
        var message: EdgeMessage
    }

    /// Listens on this replica's channel, handing what arrives to `matcher`;
    /// `joined` is called each time the listening (re)starts, when what was
    /// sent meanwhile is lost to it.
    init(storage: PostgresStorage, matcher: Matcher, logger: Logger, joined: @escaping @Sendable () async -> Void) {
        let replica = matcher.replica
        let repairs = Repairs(matcher: matcher)
        self.repairs = repairs
        outbox = GroupCommit { batch in
            // What the matcher sends meanwhile goes in the same notifications: a notification is a transaction
            // of PostgreSQL's and a wake-up of the receiver's, and under load one then carries many copies.
            try? await Task.sleep(for: Self.linger)
            return try await Self.send(batch, from: replica, storage: storage, logger: logger, repairs: repairs)
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
        repairs.cancel()
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
    static let linger = Duration.milliseconds(20)

    /// How long after copies to a replica failed it is sent them all again,
    /// at first and at most.
    static let repairDelay = Duration.seconds(1)
    static let maximumRepairDelay = Duration.seconds(16)

    /// The replicas whose copies failed: a repair of each waits its delay,
    /// one at a time, the delay doubling while sending keeps failing.
    private final class Repairs: Sendable {
        private struct State {
            var waiting: [String: Task<Void, Never>] = [:]
            var delays: [String: Duration] = [:]
        }

        private let matcher: Matcher
        private let state = Mutex(State())

        init(matcher: Matcher) {
            self.matcher = matcher
        }

        /// Copies to `replica` were sent.
        func succeeded(_ replica: String) {
            state.withLock { _ = $0.delays.removeValue(forKey: replica) }
        }

        /// Copies to `replica` failed: a repair is due, unless one waits already.
        func failed(_ replica: String) {
            state.withLock { state in
                guard state.waiting[replica] == nil else { return }
                let delay = state.delays[replica] ?? EdgeExchange.repairDelay
                state.delays[replica] = min(delay * 2, EdgeExchange.maximumRepairDelay)
                state.waiting[replica] = Task { [matcher, weak self] in
                    guard (try? await Task.sleep(for: delay)) != nil else { return }
                    // Taken off first: if this sync fails too, the next repair is scheduled.
                    self?.state.withLock { _ = $0.waiting.removeValue(forKey: replica) }
                    await matcher.resendEdges(to: replica)
                }
            }
        }

        func cancel() {
            state.withLock { state in
                state.waiting.values.forEach { $0.cancel() }
                state.waiting = [:]
            }
        }
    }

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
                             logger: Logger, repairs: Repairs) async throws -> [Result<Void, any Error>] {
        var letters: [String: [EdgeMessage]] = [:]
        for item in batch { letters[item.to, default: []].append(item.message) }
        var failed: [String: any Error] = [:]
        for (to, messages) in letters.sorted(by: { $0.key < $1.key }) {
            do {
                let bus = PostgresReplicaBus(storage: storage, channel: channel(of: to), logger: logger)
                for text in try Self.letters(from: replica, messages) { try await bus.publish(text) }
                repairs.succeeded(to)
            } catch {
                failed[to] = error
                repairs.failed(to)
                logger.warning("edge copies could not be sent to a replica; it is sent them all again shortly: \(PostgresStorage.reason(error))",
                               metadata: ["to": "\(to)", "messages": "\(messages.count)"])
            }
        }
        return batch.map { item in failed[item.to].map { .failure($0) } ?? .success(()) }
    }
}
