import Synchronization

/// Captures audio from one PCM without pause and delivers it as `chunks`.
///
/// Concurrency: each capture has its own audio thread. The `snd_pcm_t` is
/// opened, read, recovered and closed on that thread only. libasound handles
/// must not be shared, and with a single owner, recovery
/// (`snd_pcm_prepare` or `snd_pcm_resume`) cannot race other calls. Other
/// threads reach the audio thread only through a `Mutex` (counters, stop
/// flag) and a wake-up pipe. That makes the type `Sendable` without
/// `@unchecked`.
///
/// Buffering: a slow consumer must never hold up reading from the device,
/// because that would overrun it. So `chunks` keeps only the newest
/// `bufferedChunks` periods, and older ones are discarded and counted in
/// `droppedSamples`. A demodulator that falls behind thus loses old audio but
/// catches up with the present. It can spot the gap because `startFrame`
/// jumps.
public final class PCMCapture: Sendable {
    /// One read from the device, usually one period.
    public struct Chunk: Sendable {
        /// Mono samples in −1...1.
        public let samples: [Float]
        /// The index of `samples[0]`, counting every frame read since the start.
        /// A jump from the previous chunk means chunks were dropped. Frames
        /// lost to an xrun were never read, so they do not show as a jump.
        public let startFrame: Int
    }

    /// The captured audio. It finishes after `stop()`, or throws an
    /// `ALSAError` when the device fails in a way that cannot be recovered.
    public let chunks: AsyncThrowingStream<Chunk, any Error>
    public let pcm: String
    /// The sample rate obtained from the device, in Hz.
    public let rate: Int
    public let format: PCMSampleFormat
    /// The period size obtained from the device, in frames. One chunk per period.
    public let periodFrames: Int
    /// The buffer size obtained from the device, in frames.
    public let bufferFrames: Int

    /// Xruns (overruns) and suspends recovered from so far.
    public var xruns: Int { shared.state.withLock { $0.xruns } }
    /// Frames read from the device so far, including dropped ones.
    public var framesCaptured: Int { shared.state.withLock { $0.frames } }
    /// Samples discarded because the consumer of `chunks` fell behind.
    public var droppedSamples: Int { shared.state.withLock { $0.dropped } }
    /// The error that stopped capture, if any. It is also thrown from `chunks`.
    public var failure: ALSAError? { shared.state.withLock { $0.failure } }

    private let shared: Shared
    private let thread: AudioThread

    /// Opens the PCM for capture and starts reading. Throws when the PCM
    /// cannot be opened or configured.
    /// - Parameter bufferedChunks: how many chunks `chunks` holds for a slow
    ///   consumer before it drops the oldest. The default, 100, is 2 s of audio
    ///   at 20 ms periods.
    public init(configuration: PCMConfiguration = PCMConfiguration(), bufferedChunks: Int = 100) throws(ALSAError) {
        let shared = Shared(waker: try Waker(pcm: configuration.pcm))
        let (chunks, continuation) = AsyncThrowingStream.makeStream(
            of: Chunk.self, throwing: (any Error).self, bufferingPolicy: .bufferingNewest(bufferedChunks))
        let opened = OpenResult<StreamSetup>()
        let thread = try AudioThread(pcm: configuration.pcm) {
            Self.run(configuration, shared, continuation, opened)
        }
        let setup: StreamSetup
        do throws(ALSAError) { setup = try opened.wait() } catch {
            thread.join()
            throw error
        }
        self.chunks = chunks
        self.pcm = configuration.pcm
        self.rate = setup.rate
        self.format = setup.format
        self.periodFrames = setup.periodFrames
        self.bufferFrames = setup.bufferFrames
        self.shared = shared
        self.thread = thread
    }

    deinit {
        stop()
    }

    /// Stops capture and returns once the audio thread has closed the PCM.
    /// `chunks` then finishes after its buffered chunks. Calling it more than
    /// once is harmless.
    public func stop() {
        shared.state.withLock { $0.stopping = true }
        shared.waker.wake()
        thread.join()
    }

    private final class Shared: Sendable {
        struct State {
            var stopping = false
            var frames = 0
            var dropped = 0
            var xruns = 0
            var failure: ALSAError?
        }

        let state = Mutex(State())
        let waker: Waker

        init(waker: Waker) {
            self.waker = waker
        }
    }

    /// The audio thread's loop: wait for a period, read it, publish it.
    private static func run(
        _ configuration: PCMConfiguration, _ shared: Shared,
        _ continuation: AsyncThrowingStream<Chunk, any Error>.Continuation, _ opened: OpenResult<StreamSetup>
    ) {
        var stream: PCMStream
        do throws(ALSAError) { stream = try PCMStream(.capture, configuration: configuration) } catch {
            opened.post(.failure(error))
            return
        }
        opened.post(.success(StreamSetup(stream)))

        var buffer = [Float](repeating: 0, count: stream.periodFrames)
        var frames = 0
        do throws(ALSAError) {
            while !shared.state.withLock({ $0.stopping }) {
                guard try stream.wait(interruptingOn: shared.waker.readEnd) else { continue }
                let count = try stream.read(into: &buffer)
                var dropped = 0
                if count > 0, case .dropped(let old) = continuation.yield(Chunk(samples: Array(buffer[..<count]), startFrame: frames)) {
                    dropped = old.samples.count
                }
                frames += count
                let xruns = stream.xruns
                shared.state.withLock { state in
                    state.frames = frames
                    state.dropped += dropped
                    state.xruns = xruns
                }
            }
            continuation.finish()
        } catch {
            shared.state.withLock { $0.failure = error }
            continuation.finish(throwing: error)
        }
    }
}
