@testable import NearbyServer
import Synchronization

/// Replicas in one process, on one SQLite file: what one publishes every
/// listener receives, in one order. ``drop(_:)`` cuts one replica off as a
/// lost database connection does: it misses what is published until it
/// joins again.
final class InMemoryReplicaHub: Sendable {
    private struct State {
        var listeners: [Int: AsyncStream<String>.Continuation] = [:]
        var lastID = 0
        /// Replicas cut off, by bus number: their listening waits for ``reconnect(_:)``.
        var dropped: Set<Int> = []
        /// How many times each bus has joined.
        var joins: [Int: Int] = [:]
        /// A cut-off replica's listener, waiting for ``reconnect(_:)``.
        var waitingToJoin: [Int: AsyncStream<Void>.Continuation] = [:]
        /// The longest message published, in bytes.
        var longest = 0
    }

    private let state = Mutex(State())
    private let joins: AsyncStream<Int>.Continuation
    /// The number of each bus as it joins (or joins again).
    let joined: AsyncStream<Int>
    private let leaves: AsyncStream<Int>.Continuation
    /// The number of each bus once its listener has been told it left.
    private let left: AsyncStream<Int>

    init() {
        (joined, joins) = AsyncStream.makeStream(of: Int.self)
        (left, leaves) = AsyncStream.makeStream(of: Int.self)
    }

    /// The bus of replica `number`.
    func bus(_ number: Int) -> InMemoryReplicaBus { InMemoryReplicaBus(hub: self, number: number) }

    fileprivate func publish(_ message: String) {
        state.withLock { state in
            state.longest = max(state.longest, message.utf8.count)
            for listener in state.listeners.values { listener.yield(message) }
        }
    }

    /// The longest message published so far, in bytes.
    var longestMessage: Int { state.withLock { $0.longest } }

    /// What joining gives replica `number`: messages from now on, or, while
    /// it is cut off, what yields once it may try again.
    fileprivate enum Join {
        case listening(AsyncStream<String>)
        case cutOff(AsyncStream<Void>)
    }

    fileprivate func join(_ number: Int) -> Join {
        state.withLock { state in
            guard !state.dropped.contains(number) else {
                let (reconnected, continuation) = AsyncStream.makeStream(of: Void.self)
                state.waitingToJoin[number] = continuation
                return .cutOff(reconnected)
            }
            let (stream, continuation) = AsyncStream.makeStream(of: String.self)
            state.listeners[number]?.finish()
            state.listeners[number] = continuation
            state.joins[number, default: 0] += 1
            joins.yield(number)
            return .listening(stream)
        }
    }

    /// Cuts replica `number` off: its listening ends, and what is published
    /// meanwhile is lost to it. Returns once its listener has been told.
    func drop(_ number: Int) async {
        state.withLock { state in
            state.dropped.insert(number)
            state.listeners.removeValue(forKey: number)?.finish()
        }
        for await gone in left where gone == number { return }
    }

    fileprivate func listenerLeft(_ number: Int) {
        leaves.yield(number)
    }

    /// Lets replica `number` join again, and waits until it has: what is
    /// published from then on reaches it, after it has reloaded from storage.
    func reconnect(_ number: Int) async {
        let before = state.withLock { state in
            state.dropped.remove(number)
            state.waitingToJoin.removeValue(forKey: number)?.finish()
            return state.joins[number, default: 0]
        }
        // The stream holds earlier joins too: the count tells the new one.
        for await _ in joined where state.withLock({ $0.joins[number, default: 0] }) > before { return }
    }
}

struct InMemoryReplicaBus: ReplicaBus {
    let hub: InMemoryReplicaHub
    let number: Int
    /// As PostgreSQL's, so that publishers pack as they would there.
    var packedBytes: Int { PostgresReplicaBus.inlineBytes }

    func publish(_ message: String) async throws {
        hub.publish(message)
    }

    func listen(_ deliver: @escaping @Sendable (ReplicaDelivery) async throws -> Void) async {
        while !Task.isCancelled {
            let messages: AsyncStream<String>
            switch hub.join(number) {
            case .listening(let stream):
                messages = stream
            case .cutOff(let reconnected):
                // Tries again once let (or cancelled), as a bus's backoff would.
                for await _ in reconnected {}
                continue
            }
            do {
                try await deliver(.joined)
                for await message in messages { try await deliver(.message(message)) }
            } catch {}
            try? await deliver(.left)
            hub.listenerLeft(number)
        }
    }
}
