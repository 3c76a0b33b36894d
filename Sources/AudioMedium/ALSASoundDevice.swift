import ALSA

/// The sound card, through libasound: each open speaker or microphone is an
/// ALSA stream with its own thread (see ``PCMCapture`` and ``PCMPlayback``).
public struct ALSASoundDevice: SoundDevice {
    public var capture: PCMConfiguration
    public var playback: PCMConfiguration

    public init(capture: PCMConfiguration, playback: PCMConfiguration) {
        self.capture = capture
        self.playback = playback
    }

    public func openMicrophone() async throws(SoundDeviceError) -> any Microphone {
        do {
            return ALSAMicrophone(try PCMCapture(configuration: capture))
        } catch {
            throw Self.classify(error)
        }
    }

    public func openSpeaker() async throws(SoundDeviceError) -> any Speaker {
        do {
            return ALSASpeaker(try PCMPlayback(configuration: playback))
        } catch {
            throw Self.classify(error)
        }
    }

    static func classify(_ error: ALSAError) -> SoundDeviceError {
        if case .permissionDenied = error { return .refused(error.description) }
        return .unavailable(error.description)
    }
}

private final class ALSAMicrophone: Microphone {
    let capture: PCMCapture
    let blocks: AsyncStream<[Float]>
    var sampleRate: Int { capture.rate }
    var failure: SoundDeviceError? { capture.failure.map(ALSASoundDevice.classify) }

    init(_ capture: PCMCapture) {
        self.capture = capture
        let chunks = capture.chunks
        blocks = AsyncStream { continuation in
            let task = Task {
                do {
                    for try await chunk in chunks { continuation.yield(chunk.samples) }
                } catch {}
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func close() async { capture.stop() }
}

private final class ALSASpeaker: Speaker {
    let playback: PCMPlayback
    var sampleRate: Int { playback.rate }

    init(_ playback: PCMPlayback) { self.playback = playback }

    func play(_ samples: [Float]) async throws(SoundDeviceError) {
        do {
            try playback.play(samples)
        } catch {
            throw ALSASoundDevice.classify(error)
        }
    }

    func close() async { playback.stop(drain: false) }
}
