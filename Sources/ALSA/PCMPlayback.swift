import Synchronization

/// Plays queued buffers on one PCM and keeps the stream running between them.
///
/// Concurrency: as with `PCMCapture`, one audio thread of its own opens,
/// writes, recovers and closes the `snd_pcm_t`. `play(_:)` only appends to a
/// `Mutex`-guarded queue and wakes the thread through a pipe.
///
/// Idle policy: nothing is written before the first `play(_:)`, so a
/// transmitter that never sends leaves the device idle. From then on,
/// whenever the queue is empty it writes silence, one period at a time.
/// For a beacon that sends short bursts, this has three advantages:
/// - The delay from `play` to sound stays steady at about one buffer,
///   because every burst goes in behind the same amount of queued silence.
///   Restarting a stopped stream would add the time the device takes to
///   wake up, which differs from burst to burst.
/// - The amplifier does not click on and off around each burst. A click is
///   broadband and audible.
/// - An idle stream is not reported as a stream of underruns.
///
/// Queue: it holds at most `queueCapacity` samples. `play` refuses a buffer
/// that would not fit; it never drops audio already queued, because half a
/// burst is useless to the receiver.
public final class PCMPlayback: Sendable {
    public let pcm: String
    /// The sample rate obtained from the device, in Hz.
    public let rate: Int
    public let format: PCMSampleFormat
    /// The period size obtained from the device, in frames.
    public let periodFrames: Int
    /// The buffer size obtained from the device, in frames. Sound starts about
    /// this many frames after `play`.
    public let bufferFrames: Int
    /// The most samples the queue holds.
    public let queueCapacity: Int

    /// Xruns (underruns) and suspends recovered from so far.
    public var xruns: Int { shared.state.withLock { $0.xruns } }
    /// Frames handed to the device so far, silence included.
    public var framesWritten: Int { shared.state.withLock { $0.framesWritten } }
    /// Queued samples that the audio thread has not yet taken.
    public var queuedSamples: Int { shared.state.withLock { $0.queued } }
    /// The error that stopped playback, if any. `play` throws it too.
    public var failure: ALSAError? { shared.state.withLock { $0.failure } }

    private let shared: Shared
    private let thread: AudioThread

    /// Opens the PCM for playback. Throws when the PCM cannot be opened or
    /// configured.
    /// - Parameter queueCapacity: the most samples the queue may hold. The
    ///   default is 10 s at the rate obtained from the device.
    public init(configuration: PCMConfiguration = PCMConfiguration(), queueCapacity: Int? = nil) throws(ALSAError) {
        let shared = Shared(waker: try Waker(pcm: configuration.pcm))
        let opened = OpenResult<StreamSetup>()
        let thread = try AudioThread(pcm: configuration.pcm) {
            Self.run(configuration, shared, opened)
        }
        let setup: StreamSetup
        do throws(ALSAError) { setup = try opened.wait() } catch {
            thread.join()
            throw error
        }
        self.pcm = configuration.pcm
        self.rate = setup.rate
        self.format = setup.format
        self.periodFrames = setup.periodFrames
        self.bufferFrames = setup.bufferFrames
        self.queueCapacity = queueCapacity ?? 10 * setup.rate
        self.shared = shared
        self.thread = thread
    }

    deinit {
        stop()
    }

    /// Queues mono samples in −1...1 to be played after everything queued
    /// before them.
    /// - Throws: `.queueFull` when the queue would exceed `queueCapacity`,
    ///   `.stopped` after `stop`, or the error that stopped playback.
    public func play(_ samples: [Float]) throws(ALSAError) {
        guard !samples.isEmpty else { return }
        try shared.state.withLock { (state) throws(ALSAError) in
            if let failure = state.failure { throw failure }
            guard state.stop == nil else { throw .stopped(pcm: pcm) }
            guard state.queued + samples.count <= queueCapacity else {
                throw .queueFull(pcm: pcm, capacity: queueCapacity)
            }
            state.queue.append(samples)
            state.queued += samples.count
        }
        shared.waker.wake()
    }

    /// Stops playback and returns once the audio thread has closed the PCM.
    /// Calling it more than once is harmless; the first call's choice stands.
    /// - Parameter drain: when true, everything queued plays first and the
    ///   device buffer empties before the PCM closes. This takes the length
    ///   of the queued audio plus up to one buffer. When false, queued and
    ///   buffered audio are dropped and the call returns at once.
    public func stop(drain: Bool = false) {
        shared.state.withLock { state in
            if state.stop == nil { state.stop = drain ? .drain : .drop }
        }
        shared.waker.wake()
        thread.join()
    }

    private final class Shared: Sendable {
        enum Stop { case drain, drop }

        struct State {
            var queue: [[Float]] = []
            var queued = 0
            var stop: Stop?
            var framesWritten = 0
            var xruns = 0
            var failure: ALSAError?
        }

        let state = Mutex(State())
        let waker: Waker

        init(waker: Waker) {
            self.waker = waker
        }
    }

    /// The audio thread's loop: take the next buffer (or silence), wait for
    /// room, write what fits.
    private static func run(_ configuration: PCMConfiguration, _ shared: Shared, _ opened: OpenResult<StreamSetup>) {
        var stream: PCMStream
        do throws(ALSAError) { stream = try PCMStream(.playback, configuration: configuration) } catch {
            opened.post(.failure(error))
            return
        }
        opened.post(.success(StreamSetup(stream)))

        let silence = [Float](repeating: 0, count: stream.periodFrames)
        var current: [Float] = []
        var offset = 0
        var started = false
        do throws(ALSAError) {
            while true {
                let needsBuffer = offset == current.count
                let (stop, next) = shared.state.withLock { state -> (Shared.Stop?, [Float]?) in
                    guard state.stop != .drop, needsBuffer, !state.queue.isEmpty else { return (state.stop, nil) }
                    let next = state.queue.removeFirst()
                    state.queued -= next.count
                    return (state.stop, next)
                }
                if stop == .drop {
                    try stream.drop()
                    break
                }
                if let next {
                    (current, offset, started) = (next, 0, true)
                } else if needsBuffer {
                    if stop == .drain {
                        try stream.drain()
                        break
                    }
                    guard started else {
                        shared.waker.wait()
                        continue
                    }
                    (current, offset) = (silence, 0)
                }
                guard try stream.wait(interruptingOn: shared.waker.readEnd) else {
                    shared.waker.reset()
                    continue
                }
                let written = try stream.write(current[offset...])
                offset += written
                let xruns = stream.xruns
                shared.state.withLock { state in
                    state.framesWritten += written
                    state.xruns = xruns
                }
            }
        } catch {
            shared.state.withLock { $0.failure = error }
        }
    }
}
