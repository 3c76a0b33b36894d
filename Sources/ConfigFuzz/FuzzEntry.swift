// Coverage-guided fuzzing of the files nearbyd and nearby-server read their
// settings from (Sources/ConfigFile on TOMLKit, nearbyd's
// DaemonConfiguration and static publication files, nearby-server's
// ServerConfiguration); plus a plain replay runner for builds without the
// fuzzer (README.md).

import ConfigFile
import Foundation
import FuzzReplay
import NearbyCore
@_spi(Testing) import NearbyDaemon
import NearbyServer

/// The first byte picks the reader (by its value modulo 3: nearbyd's
/// configuration, nearby-server's, a static publication, read with BLE
/// enabled when bit 2 is set and audio when bit 3 is), the rest is the file.
/// The file is read from its path, as the programs read it (a temporary
/// file's /proc/self/fd path, the file itself removed at once).
func check(_ input: [UInt8]) {
    guard let first = input.first else { return }
    var template = Array("\(NSTemporaryDirectory())/config-fuzz.XXXXXX".utf8CString)
    let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    guard fd >= 0 else { fatalError("mkstemp: \(String(cString: strerror(errno)))") }
    // Gone from the directory at once; its /proc/self/fd path reads it until it is closed.
    unlink(template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
    defer { close(fd) }
    let text = Array(input.dropFirst())
    guard text.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == text.count else { fatalError("writing the temporary file") }
    let path = "/proc/self/fd/\(fd)"
    switch first % 3 {
    case 0:
        ConfigurationContract.checkConfiguration(path: path)
    case 1:
        checkServerConfiguration(path: path)
    default:
        var enabled: Set<Medium> = []
        if first & 4 != 0 { enabled.insert(.ble) }
        if first & 8 != 0 { enabled.insert(.audio) }
        ConfigurationContract.checkStaticPublication(path: path, enabled: enabled)
    }
}

/// nearby-server's configuration: taken within its own rules, or refused
/// with an error that names the file.
func checkServerConfiguration(path: String) {
    do {
        let configuration = try ServerConfiguration.load(path: path, required: true)
        do {
            try configuration.validate()
        } catch {
            fatalError("nearby-server: a configuration taken that its own check refuses: \(error)")
        }
    } catch {
        guard error.message.hasPrefix(path) else { fatalError("nearby-server: an error that does not name the file: \(error)") }
    }
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("config-fuzz", property: check)
    }
}
