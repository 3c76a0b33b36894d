// Coverage-guided fuzzing of what nearby-server parses from its clients
// (Sources/NearbyServer, Sources/ServerAPI): every request body the HTTP API
// decodes, the WebSockets' text messages, the beacon registry's request
// targets (beacon name, q, namespacedType) and the PROXY protocol header
// of a balancer's connections; plus a plain replay runner for builds
// without the fuzzer (README.md).

import FuzzReplay
@_spi(Testing) import NearbyServer

/// The first byte picks what the rest is (``ServerRequestContract/Input``,
/// by its number); the rest is that body, message or request target.
func check(_ input: [UInt8]) {
    guard let first = input.first else { return }
    let kinds = ServerRequestContract.Input.allCases
    ServerRequestContract.check(kinds[Int(first) % kinds.count], Array(input.dropFirst()))
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness).
@main
enum Main {
    static func main() {
        FuzzHarness.main("server-fuzz", property: check)
    }
}
