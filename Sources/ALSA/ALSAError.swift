import CALSA
import Glibc

/// Why an ALSA operation failed.
///
/// Every case names the PCM, so one log line says which device failed. The
/// daemon tells the first cases apart to give a specific answer (for example,
/// it reports `.permissionDenied` as a microphone permission problem).
public enum ALSAError: Error, Equatable, Sendable {
    /// The PCM was refused with EACCES or EPERM. Usually the user is not in
    /// the `audio` group, or a file or device the PCM needs is unreadable.
    case permissionDenied(pcm: String)
    /// The configuration has no such PCM, or its device is missing (ENOENT,
    /// ENODEV, ENXIO). A device unplugged mid-stream also ends up here.
    case noDevice(pcm: String)
    /// Another process holds the device (EBUSY).
    case busy(pcm: String)
    /// The PCM offers no interleaved mono stream in Float32 or S16.
    case unsupportedFormat(pcm: String)
    /// The PCM runs at neither 48000 Hz nor 44100 Hz without resampling.
    /// `rates` is the range it does offer.
    case unsupportedRate(pcm: String, rates: ClosedRange<Int>)
    /// `PCMPlayback.play` was refused because the queue would hold more than
    /// `capacity` samples.
    case queueFull(pcm: String, capacity: Int)
    /// The stream was stopped and takes no more audio.
    case stopped(pcm: String)
    /// Any other failure. `operation` is what was attempted, `code` is the
    /// negative errno that libasound returned, and `message` is the
    /// `snd_strerror` text for it.
    case failed(pcm: String, operation: String, code: Int32, message: String)

    /// Classifies a negative errno returned by libasound for `operation` on `pcm`.
    init(code: Int32, pcm: String, operation: String) {
        switch -code {
        case EACCES, EPERM: self = .permissionDenied(pcm: pcm)
        case ENOENT, ENODEV, ENXIO: self = .noDevice(pcm: pcm)
        case EBUSY: self = .busy(pcm: pcm)
        default:
            self = .failed(pcm: pcm, operation: operation, code: code,
                           message: String(cString: snd_strerror(code)))
        }
    }
}

extension ALSAError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .permissionDenied(let pcm): "ALSA PCM '\(pcm)': permission denied"
        case .noDevice(let pcm): "ALSA PCM '\(pcm)': no such PCM or device"
        case .busy(let pcm): "ALSA PCM '\(pcm)': device busy"
        case .unsupportedFormat(let pcm): "ALSA PCM '\(pcm)': no interleaved mono Float32 or S16 format"
        case .unsupportedRate(let pcm, let rates):
            "ALSA PCM '\(pcm)': offers \(rates.lowerBound)...\(rates.upperBound) Hz, need 48000 or 44100 Hz"
        case .queueFull(let pcm, let capacity): "ALSA PCM '\(pcm)': playback queue full (\(capacity) samples)"
        case .stopped(let pcm): "ALSA PCM '\(pcm)': stream stopped"
        case .failed(let pcm, let operation, let code, let message):
            "ALSA PCM '\(pcm)': \(operation) failed: \(message) (\(code))"
        }
    }
}
