/// A speaker and a microphone: a sound card through ALSA, or nearby-air's
/// acoustic space. The audio medium opens them only while it needs them.
public protocol SoundDevice: Sendable {
    /// Opens the microphone: blocks of samples arrive until it is closed or fails.
    func openMicrophone() async throws(SoundDeviceError) -> any Microphone
    /// Opens the speaker.
    func openSpeaker() async throws(SoundDeviceError) -> any Speaker
}

/// An open microphone.
public protocol Microphone: Sendable {
    var sampleRate: Int { get }
    /// What it hears, block after block; ends when it is closed or fails
    /// (then `failure` says why).
    var blocks: AsyncStream<[Float]> { get }
    var failure: SoundDeviceError? { get }
    func close() async
}

/// An open speaker.
public protocol Speaker: Sendable {
    var sampleRate: Int { get }
    /// Queues samples to be played after what is queued already.
    func play(_ samples: [Float]) async throws(SoundDeviceError)
    func close() async
}

/// Why a speaker or microphone cannot be used.
public enum SoundDeviceError: Error, Equatable, CustomStringConvertible {
    /// The system refuses the daemon (file permissions, a sandbox, a policy):
    /// what `MicrophonePermissionError` reports.
    case refused(String)
    /// The device is missing, busy or failed; it may come back.
    case unavailable(String)

    public var description: String {
        switch self {
        case .refused(let reason): "refused: \(reason)"
        case .unavailable(let reason): "unavailable: \(reason)"
        }
    }
}
