import Dispatch
import Synchronization

/// The last word on a graceful shutdown: if the process has not finished by
/// the deadline, `expire` runs.
///
/// ServiceLifecycle bounds the graceful phase, then cancels what is left; a
/// service that does not return when cancelled would hold the process for
/// ever (its own bound, `maximumCancellationDuration`, ends in `fatalError`:
/// a crash and a core file rather than a line that says what happened). The
/// deadline runs on a Dispatch queue, not on the cooperative pool, so a pool
/// whose threads are all stuck cannot hold it back.
final class ShutdownDeadline: Sendable {
    private let cancelled = Atomic<Bool>(false)

    /// Starts counting now.
    init(after delay: Duration, expire: @escaping @Sendable () -> Void) {
        let nanoseconds = delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { [self] in
            if !cancelled.load(ordering: .acquiring) { expire() }
        }
    }

    /// The shutdown finished in time: `expire` will not run.
    func cancel() {
        cancelled.store(true, ordering: .releasing)
    }
}
