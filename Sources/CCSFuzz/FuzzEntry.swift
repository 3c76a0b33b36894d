// Coverage-guided fuzzing of the JSON application servers send in <gcm>
// (CCSPayload, Sources/NearbyServer/Connection), and of the JSON the server
// builds from any string; plus a plain replay runner for builds without the
// fuzzer (README.md).

import FuzzReplay
@_spi(Testing) import NearbyServer

/// The input as the text of a `<gcm>` element (which XML has already made
/// Unicode: ill-formed UTF-8 is repaired here).
func check(_ input: [UInt8]) {
    CCSPayloadContract.check(String(decoding: input, as: UTF8.self))
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("ccs-fuzz", property: check)
    }
}
