// Coverage-guided fuzzing of what nearbyd's raw-HCI backend reads from its
// socket (Sources/BluetoothHCI: HCIEvent, advertising reports, the sightings
// made of them); plus a plain replay runner for builds without the fuzzer
// (README.md).

@_spi(Testing) import BluetoothHCI
import FuzzReplay

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("hci-fuzz", property: { HCIEventContract.check(packet: $0) })
    }
}
