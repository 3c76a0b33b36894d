import CSystemd
import Foundation
import Synchronization

/// The one thread that owns every sd-bus handle in the process.
///
/// sd-bus is not thread-safe, so each `sd_bus` and every message, slot and track
/// made from it is touched only on this thread. The thread runs the thread-default
/// `sd_event` loop: bus connections attach to it, and Swift jobs for ``BusActor``
/// arrive through an eventfd, so a callback from sd-bus and a Swift task on the bus
/// actor never run at the same time. That makes the loop a `SerialExecutor`, and
/// lets a C callback on the thread enter the actor with ``BusActor/assumeIsolated(_:)``.
public final class BusLoop: SerialExecutor {
    /// The process's bus thread, started on first use.
    public static let shared = BusLoop()

    private let queue = Mutex<[UnownedJob]>([])
    private let wakeFD: Int32
    private let thread = Atomic<UInt>(0)

    private init() {
        wakeFD = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        precondition(wakeFD >= 0, "eventfd failed: \(String(cString: strerror(errno)))")
        let started = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [self] in run(started) }
        started.wait()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let wasIdle = queue.withLock { jobs in
            jobs.append(job)
            return jobs.count == 1
        }
        if wasIdle { wake() }
    }

    public func isIsolatingCurrentContext() -> Bool? {
        isLoopThread
    }

    public func checkIsolated() {
        precondition(isLoopThread, "expected to run on the sd-bus thread")
    }

    var isLoopThread: Bool {
        thread.load(ordering: .acquiring) == UInt(pthread_self())
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, MemoryLayout<UInt64>.size)
    }

    private func run(_ started: DispatchSemaphore) {
        thread.store(UInt(pthread_self()), ordering: .releasing)
        // Named for top, perf and gdb.
        _ = nearby_name_thread("sd-bus")
        var event: OpaquePointer?
        precondition(sd_event_default(&event) >= 0, "sd_event_default failed")
        let onWake: sd_event_io_handler_t = { _, fd, _, userdata in
            var count: UInt64 = 0
            _ = read(fd, &count, MemoryLayout<UInt64>.size)
            Unmanaged<BusLoop>.fromOpaque(userdata!).takeUnretainedValue().runPending()
            return 0
        }
        let source = sd_event_add_io(event, nil, wakeFD, UInt32(EPOLLIN.rawValue), onWake,
                                     Unmanaged.passUnretained(self).toOpaque())
        precondition(source >= 0, "sd_event_add_io failed")
        started.signal()
        let result = sd_event_loop(event)
        fatalError("sd_event_loop ended: \(result)")
    }

    private func runPending() {
        let jobs = queue.withLock { jobs in
            defer { jobs.removeAll(keepingCapacity: true) }
            return jobs
        }
        let executor = asUnownedSerialExecutor()
        for job in jobs { job.runSynchronously(on: executor) }
    }
}

/// The global actor of all D-Bus work: code isolated to it runs on ``BusLoop``'s
/// thread, where it may use sd-bus handles directly.
@globalActor public actor BusActor {
    public static let shared = BusActor()

    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        BusLoop.shared.asUnownedSerialExecutor()
    }

    /// Runs `body` as bus-actor code from a C callback that sd-bus made on the bus
    /// thread, passing it the callback's `arguments` (C pointers are not Sendable,
    /// so they are handed over rather than captured). Traps on any other thread.
    ///
    /// `body` is taken as escaping, though it is only called, so that it can be
    /// cast as it is: `withoutActuallyEscaping` boxed a closure context for the
    /// cast on every call, an allocation per method call and per object looked
    /// up. The callbacks' closures capture nothing, so passing one allocates nothing.
    public static func assumeIsolated<Arguments, T>(
        _ arguments: Arguments, _ body: @escaping @BusActor (Arguments) -> T
    ) -> T {
        BusLoop.shared.checkIsolated()
        // The same cast MainActor.assumeIsolated does: the isolation was checked above.
        return unsafeBitCast(body, to: ((Arguments) -> T).self)(arguments)
    }
}
