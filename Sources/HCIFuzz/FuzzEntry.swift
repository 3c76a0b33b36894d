// Coverage-guided fuzzing of what nearbyd's raw-HCI backend reads from its
// socket (Sources/BluetoothHCI: HCIEvent, advertising reports, the sightings
// made of them); plus a plain replay runner for builds without the fuzzer
// (README.md).

@_spi(Testing) import BluetoothHCI
import FuzzReplay

/// libFuzzer calls this once per input; a trap here is a finding.
@_cdecl("LLVMFuzzerTestOneInput")
public func hciFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    HCIEventContract.check(packet: input)
    return 0
}

#if HCI_LIBFUZZER
import Foundation
import FuzzDriver

/// Hands control to libFuzzer, which parses its own command-line flags.
@main
enum FuzzMain {
    static func main() {
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, hciFuzzOneInput))
    }
}
#else
/// Without libFuzzer: replays the files and corpus directories named on the
/// command line (each a packet as the socket delivers it) through the same contract.
@main
enum ReplayRunner {
    static func main() throws {
        let count = try FuzzReplay.run(Array(CommandLine.arguments.dropFirst())) { HCIEventContract.check(packet: $0) }
        print("hci-fuzz: replayed \(count) inputs, no broken promises")
    }
}
#endif
