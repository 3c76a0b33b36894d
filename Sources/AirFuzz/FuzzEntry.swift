// Coverage-guided fuzzing of what a connection brings nearby-air
// (Sources/NearbyAir): the line protocol, the switch to audio sample frames,
// the frames, and the space they drive; plus a plain replay runner for builds
// without the fuzzer (README.md).

import FuzzReplay
@_spi(Testing) import NearbyAir

/// An input is one byte that says how the rest is cut into reads, then what
/// the connection brings. 0xFF: a read ends at each 0xFF byte (the seeds'
/// way for lines; a sample frame then loses those bytes); 0: one read of it
/// all; N: N bytes each.
func check(_ input: [UInt8]) {
    guard let first = input.first else { return }
    let rest = input.dropFirst()
    let reads: [[UInt8]]
    if first == 0xFF {
        reads = rest.split(separator: 0xFF, omittingEmptySubsequences: true).map(Array.init)
    } else {
        let size = first == 0 ? max(rest.count, 1) : Int(first)
        reads = stride(from: rest.startIndex, to: rest.endIndex, by: size).map { Array(rest[$0..<min($0 + size, rest.endIndex)]) }
    }
    AirConnectionContract.check(reads: reads)
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("air-fuzz", property: check)
    }
}
