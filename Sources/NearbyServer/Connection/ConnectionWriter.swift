import Synchronization

/// Group commit for the connection server: the writes that every session
/// and channel asks for while a transaction commits go together in the next
/// one (``ConnectionStorage/write(_:)``), so that a commit's cost (an fsync,
/// PostgreSQL's round trips) is paid once for hundreds of messages rather
/// than once for each. A write is queued at once, in the order it was
/// asked, and its caller learns the outcome when its transaction has
/// committed: nothing is acknowledged before it is durable.
///
/// One transaction at a time: while it commits, the next batch gathers.
/// What waits is bounded by the callers, each of which has few writes in
/// flight (a channel one, a session `[xmpp] max-unacked-per-connection`).
final class ConnectionWriter: Sendable {
    private struct Queued {
        let write: ConnectionWrite
        let outcome: AsyncThrowingStream<ConnectionWriteResult, any Error>.Continuation
    }

    private struct State {
        var queued: [Queued] = []
        var committing = false
    }

    /// Commits a batch: ``ConnectionStorage/write(_:)``.
    private let commit: @Sendable ([ConnectionWrite]) async throws -> [Result<ConnectionWriteResult, any Error>]
    private let state = Mutex(State())

    convenience init(storage: any ConnectionStorage) {
        self.init { try await storage.write($0) }
    }

    /// A writer that commits with `commit` (tests watch the batches).
    init(commit: @escaping @Sendable ([ConnectionWrite]) async throws -> [Result<ConnectionWriteResult, any Error>]) {
        self.commit = commit
    }

    /// Queues `write` for the next transaction; the result is its outcome,
    /// to be awaited once.
    func enqueue(_ write: ConnectionWrite) -> PendingWrite {
        let (outcome, continuation) = AsyncThrowingStream.makeStream(of: ConnectionWriteResult.self)
        let start = state.withLock { state in
            state.queued.append(Queued(write: write, outcome: continuation))
            guard !state.committing else { return false }
            state.committing = true
            return true
        }
        if start { Task { await commitWhileQueued() } }
        return PendingWrite(outcome: outcome)
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
                let results = try await commit(batch.map(\.write))
                guard results.count == batch.count else { throw ConnectionWriteMismatch() }
                for (queued, result) in zip(batch, results) {
                    queued.outcome.yield(with: result)
                    queued.outcome.finish()
                }
            } catch {
                for queued in batch { queued.outcome.finish(throwing: error) }
            }
        }
    }
}

/// A queued write's outcome, once its transaction has committed.
struct PendingWrite: Sendable {
    fileprivate let outcome: AsyncThrowingStream<ConnectionWriteResult, any Error>

    /// The outcome; waits for the commit. Awaited once.
    func result() async throws -> ConnectionWriteResult {
        for try await result in outcome { return result }
        // Without an outcome: only when the caller was cancelled.
        throw CancellationError()
    }
}
