import Synchronization

/// Group commit: what many callers ask for while one commit is under way
/// goes together in the next, so that a commit's fixed cost (an fsync,
/// PostgreSQL's round trips, a notification's wake-ups) is paid once for
/// many items rather than once for each. An item is queued at once, in the
/// order it was asked, and its caller learns its outcome when its batch has
/// been committed: nothing is acknowledged before.
///
/// One commit at a time: while it runs, the next batch gathers. What waits
/// is bounded by the callers: each has few items in flight.
///
/// The connection server's writes (`ConnectionHub`, over
/// ``ConnectionStorage/write(_:)``) and the matcher's events among replicas
/// (``ReplicatedMatcherFeed``, packed into notifications) go this way.
final class GroupCommit<Item: Sendable, Outcome: Sendable>: Sendable {
    private struct Queued {
        let item: Item
        let outcome: AsyncThrowingStream<Outcome, any Error>.Continuation
    }

    private struct State {
        var queued: [Queued] = []
        var committing = false
    }

    /// Commits a batch, returning each item's outcome in order.
    private let commit: @Sendable ([Item]) async throws -> [Result<Outcome, any Error>]
    private let state = Mutex(State())

    init(commit: @escaping @Sendable ([Item]) async throws -> [Result<Outcome, any Error>]) {
        self.commit = commit
    }

    /// Queues `item` for the next commit; the result is its outcome, to be awaited once.
    func enqueue(_ item: Item) -> Pending {
        let (outcome, continuation) = AsyncThrowingStream.makeStream(of: Outcome.self)
        let start = state.withLock { state in
            state.queued.append(Queued(item: item, outcome: continuation))
            guard !state.committing else { return false }
            state.committing = true
            return true
        }
        if start { Task { await commitWhileQueued() } }
        return Pending(outcome: outcome)
    }

    /// Commits what is queued, then what was queued meanwhile, until nothing is.
    private func commitWhileQueued() async {
        while true {
            let batch = state.withLock { state in
                let batch = state.queued
                state.queued = []
                if batch.isEmpty { state.committing = false }
                return batch
            }
            guard !batch.isEmpty else { return }
            do {
                let results = try await commit(batch.map(\.item))
                guard results.count == batch.count else { throw GroupCommitMismatch() }
                for (queued, result) in zip(batch, results) {
                    queued.outcome.yield(with: result)
                    queued.outcome.finish()
                }
            } catch {
                for queued in batch { queued.outcome.finish(throwing: error) }
            }
        }
    }

    /// A queued item's outcome, once its batch has been committed.
    struct Pending: Sendable {
        fileprivate let outcome: AsyncThrowingStream<Outcome, any Error>

        /// The outcome; waits for the commit. Awaited once.
        func result() async throws -> Outcome {
            for try await result in outcome { return result }
            // Without an outcome: only when the caller was cancelled.
            throw CancellationError()
        }
    }
}

/// A commit answered with another number of outcomes than it had items, or
/// with an outcome of another kind than asked: a bug.
struct GroupCommitMismatch: Error, CustomStringConvertible {
    var description: String { "a group commit answered with outcomes that do not match what was asked" }
}

/// The connection server's writes, committed together (``ConnectionStorage/write(_:)``).
typealias ConnectionWriter = GroupCommit<ConnectionWrite, ConnectionWriteResult>

extension GroupCommit where Item == ConnectionWrite, Outcome == ConnectionWriteResult {
    convenience init(storage: any ConnectionStorage) {
        self.init { try await storage.write($0) }
    }
}
