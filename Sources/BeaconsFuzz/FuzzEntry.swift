// Coverage-guided fuzzing entry point for libFuzzer, plus a plain replay
// runner for builds without the fuzzer (so `swift build` still links).
//
// Build and run (see README.md):
//   swift build -c debug --product beacons-fuzz --scratch-path .build-fuzz \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -DLIBFUZZER
//   .build-fuzz/debug/beacons-fuzz -max_len=64 -max_total_time=60 fuzz-corpus/

import Beacons
import Foundation
import FuzzReplay

/// The property the fuzzer hunts for violations of: parsing never traps,
/// and whatever parses rebuilds to bytes that parse to the same value.
enum FuzzProperty {
    static func check(_ input: [UInt8]) {
        if let frame = BeaconFrame.parse(advertisingData: input) {
            let rebuilt = frame.advertisingData
            guard rebuilt.count <= 31, BeaconFrame.parse(advertisingData: rebuilt) == frame else {
                fatalError("payload round trip failed for \(input)")
            }
        }
        if let frame = try? BeaconFrame(eddystoneServiceData: input) {
            guard (try? BeaconFrame(advertisingData: frame.advertisingData)) == frame else {
                fatalError("service data round trip failed for \(input)")
            }
        }
        if let beacon = try? IBeacon(manufacturerData: input) {
            guard (try? IBeacon(manufacturerData: beacon.manufacturerData)) == beacon else {
                fatalError("manufacturer data round trip failed for \(input)")
            }
        }
        if let url = try? EddystoneURL.decode(input) {
            guard let encoded = try? EddystoneURL.encode(url),
                  encoded.count <= input.count,
                  (try? EddystoneURL.decode(encoded)) == url
            else { fatalError("URL round trip failed for \(input)") }
        }
    }
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness) that counts the frames of each
/// kind, or `--write-seeds DIR`.
@main
enum Main {
    static func main() throws {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "--write-seeds", arguments.count == 2 {
            try writeSeeds(to: arguments[1])
            return
        }
        FuzzHarness.main("beacons-fuzz", property: { FuzzProperty.check($0) }) { paths in
            var kinds: [BeaconKind: Int] = [:]
            let count = try FuzzReplay.run(paths) { input in
                FuzzProperty.check(input)
                if let frame = BeaconFrame.parse(advertisingData: input) { kinds[frame.kind, default: 0] += 1 }
            }
            return (["replayed \(count) inputs, no property violations"]
                + kinds.sorted { $0.key.rawValue < $1.key.rawValue }.map { "  \($1) parse as \($0) advertisements" })
                .joined(separator: "\n")
        }
    }

    /// Writes one valid advertisement per frame kind as a starting corpus,
    /// so the fuzzer mutates real frames instead of rediscovering them.
    static func writeSeeds(to directory: String) throws {
        let frames: [BeaconFrame] = [
            .eddystoneUID(EddystoneUID(
                txPower: -20,
                namespace: try EddystoneNamespace(hex: "8b0ca750095477cb3e77"),
                instance: try EddystoneInstance(hex: "010203040506"))),
            .eddystoneURL(try EddystoneURL(txPower: -18, url: "https://goo.gl/S6zT6P")),
            .eddystoneURL(try EddystoneURL(txPower: 0, url: "http://www.google.com/")),
            .eddystoneTLM(EddystoneTLM(
                batteryVoltage: 3000, temperatureFixedPoint: 0x1780,
                advertisingPDUCount: 256, uptimeDeciseconds: 3600)),
            .eddystoneEID(EddystoneEID(txPower: -10, ephemeralID: try EddystoneEphemeralID(hex: "0123456789abcdef"))),
            .iBeacon(IBeacon(
                proximityUUID: UUID(uuidString: "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")!,
                major: 1, minor: 2, measuredPower: -59)),
        ]
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for (index, frame) in frames.enumerated() {
            try Data(frame.advertisingData).write(to: URL(fileURLWithPath: "\(directory)/seed-\(index)"))
        }
        print("wrote \(frames.count) seeds to \(directory)")
    }
}
