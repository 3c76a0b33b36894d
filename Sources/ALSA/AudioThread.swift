import Dispatch
import Glibc
import Synchronization

/// A joinable pthread that runs one closure. Each PCMCapture and PCMPlayback
/// runs its stream on one of these.
final class AudioThread: Sendable {
    private let thread: Mutex<pthread_t?>

    /// Starts `body` on a new thread.
    init(pcm: String, _ body: @escaping @Sendable () -> Void) throws(ALSAError) {
        // Carries the closure through pthread_create's single pointer argument.
        final class Box {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        var id = pthread_t()
        let created = pthread_create(&id, nil, { context in
            Unmanaged<Box>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        }, box)
        guard created == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            throw ALSAError(code: -created, pcm: pcm, operation: "start audio thread")
        }
        thread = Mutex(id)
    }

    /// Waits for the thread to return. Any number of calls from any threads
    /// is fine, but never call it from the thread itself. The lock makes
    /// concurrent callers wait for the one that joins. The audio thread never
    /// takes this lock, so holding it while joining cannot deadlock.
    func join() {
        thread.withLock { thread in
            if let id = thread.take() { pthread_join(id, nil) }
        }
    }
}

/// Interrupts an audio thread's poll(). The read end of this non-blocking
/// self-pipe is in the thread's poll set, and `wake()` makes it readable. A
/// pipe stays readable until it is reset, so a wake-up sent just before the
/// thread starts to poll is not lost.
final class Waker: Sendable {
    let readEnd: Int32
    private let writeEnd: Int32

    init(pcm: String) throws(ALSAError) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            throw ALSAError(code: -errno, pcm: pcm, operation: "create wake-up pipe")
        }
        for end in ends {
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    func wake() {
        var byte: UInt8 = 1
        // A full pipe (EAGAIN) is fine: a wake-up is already pending.
        _ = write(writeEnd, &byte, 1)
    }

    /// Drains pending wake-ups.
    func reset() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(readEnd, &bytes, bytes.count) > 0 {}
    }

    /// Blocks until `wake()` is called, then drains the pipe.
    func wait() {
        var descriptor = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
        while poll(&descriptor, 1, -1) < 0, errno == EINTR {}
        reset()
    }
}

/// Passes the result of opening the PCM from the audio thread back to the
/// initializer that waits for it.
final class OpenResult<Value: Sendable>: Sendable {
    private let result = Mutex<Result<Value, ALSAError>?>(nil)
    private let ready = DispatchSemaphore(value: 0)

    func post(_ value: Result<Value, ALSAError>) {
        result.withLock { $0 = value }
        ready.signal()
    }

    func wait() throws(ALSAError) -> Value {
        ready.wait()
        return try result.withLock { $0! }.get()
    }
}

/// The stream facts that the public types copy once the PCM is open.
struct StreamSetup: Sendable {
    let rate: Int
    let format: PCMSampleFormat
    let periodFrames: Int
    let bufferFrames: Int

    init(_ stream: borrowing PCMStream) {
        rate = stream.rate
        format = stream.format
        periodFrames = stream.periodFrames
        bufferFrames = stream.bufferFrames
    }
}
