import Synchronization

/// The first of an operation's outcome and a deadline, without waiting for
/// an operation that ignores cancellation.
enum FirstOutcome {
    /// The operation's result, or ``TimedOut`` once `timeout` has passed;
    /// then the operation is cancelled and left to end by itself.
    static func race(within timeout: Duration, _ operation: @escaping @Sendable () async throws -> Void) async -> Result<Void, any Error> {
        await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, any Error>, Never>) in
            let race = Race(continuation)
            let work = Task {
                do {
                    try await operation()
                    race.finish(.success(()))
                } catch {
                    race.finish(.failure(error))
                }
            }
            race.startDeadline(Task {
                try? await Task.sleep(for: timeout)
                race.finish(.failure(TimedOut(timeout: timeout)))
                work.cancel()
            })
        }
    }

    /// No outcome within the deadline.
    struct TimedOut: Error, CustomStringConvertible {
        let timeout: Duration
        var description: String { "no answer within \(timeout)" }
    }

    /// One race's continuation, resumed once, and its deadline's task,
    /// cancelled when the race is decided so that it does not sleep on.
    private final class Race: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Result<Void, any Error>, Never>?
            var deadline: Task<Void, Never>?
        }

        private let state: Mutex<State>

        init(_ continuation: CheckedContinuation<Result<Void, any Error>, Never>) {
            state = Mutex(State(continuation: continuation))
        }

        func startDeadline(_ task: Task<Void, Never>) {
            let decided = state.withLock { state in
                state.deadline = task
                return state.continuation == nil
            }
            if decided { task.cancel() }
        }

        func finish(_ result: Result<Void, any Error>) {
            let (continuation, deadline) = state.withLock { state in
                defer { state.continuation = nil }
                return (state.continuation, state.deadline)
            }
            guard let continuation else { return }
            continuation.resume(returning: result)
            deadline?.cancel()
        }
    }
}
