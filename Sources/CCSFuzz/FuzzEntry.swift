// Coverage-guided fuzzing of the JSON application servers send in <gcm>
// (CCSPayload, Sources/NearbyServer/Connection), and of the JSON the server
// builds from any string; plus a plain replay runner for builds without the
// fuzzer (README.md).

import FuzzReplay
@_spi(Testing) import NearbyServer

/// libFuzzer calls this once per input; a trap here is a finding.
@_cdecl("LLVMFuzzerTestOneInput")
public func ccsFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    check(input)
    return 0
}

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
        FuzzHarness.main("ccs-fuzz", ccsFuzzOneInput, check: check)
    }
}
