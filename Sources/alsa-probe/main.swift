// alsa-probe PCM capture|playback [CONFIG-FILE]
//
// Opens one PCM and prints "opened" or the name of the ALSAError case. The
// tests run it under an unprivileged uid, because root bypasses file modes.
import ALSA
import Glibc

let arguments = CommandLine.arguments
guard arguments.count >= 3, let direction = ["capture": PCMDirection.capture, "playback": .playback][arguments[2]] else {
    print("usage: alsa-probe PCM capture|playback [CONFIG-FILE]")
    exit(2)
}
do throws(ALSAError) {
    let configuration = PCMConfiguration(pcm: arguments[1], configFile: arguments.count > 3 ? arguments[3] : nil)
    _ = try PCMStream(direction, configuration: configuration)
    print("opened")
} catch {
    let name = switch error {
    case .permissionDenied: "permissionDenied"
    case .noDevice: "noDevice"
    case .busy: "busy"
    case .unsupportedFormat: "unsupportedFormat"
    case .unsupportedRate: "unsupportedRate"
    case .queueFull: "queueFull"
    case .stopped: "stopped"
    case .failed: "failed"
    }
    print(name)
}
