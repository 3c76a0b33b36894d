import NearbyCore
import Foundation
import Testing
@testable import Beacons

/// Seeded random-input test: parsing must never crash, and whatever parses
/// must rebuild to bytes that parse back to the same value.
///
/// `BEACONS_FUZZ_ITERATIONS` overrides the input count (default 10^6);
/// `BEACONS_FUZZ_SEED` overrides the seed to explore beyond the CI inputs.
@Suite("Fuzz")
struct FuzzTests {
    static let defaultIterations = 1_000_000
    static let defaultSeed: UInt64 = 0x00BE_AC05_5EED_2024

    @Test func parsersNeverCrashAndRoundTrip() {
        let environment = ProcessInfo.processInfo.environment
        let iterations = environment["BEACONS_FUZZ_ITERATIONS"].flatMap(Int.init) ?? Self.defaultIterations
        let seed = environment["BEACONS_FUZZ_SEED"].flatMap { UInt64($0) } ?? Self.defaultSeed

        var inputs = FuzzInputs(rng: SplitMix64(seed: seed))
        var checker = RoundTripChecker()
        let start = ContinuousClock.now
        for i in 0..<iterations {
            // 4 inputs in every 64 (one per generator) also go through the
            // public throwing API, which must agree with the Result core.
            let throwingToo = i % 64 < 4
            switch i % 4 {
            case 0:
                checker.check(inputs.randomBytes(), throwingToo: throwingToo)
            case 1:
                guard let frame = inputs.validFrame() else {
                    checker.fail("decoded URL could not be re-encoded", [])
                    continue
                }
                checker.checkBuilt(frame)
                checker.check(inputs.mutated(frame.advertisingData), throwingToo: throwingToo)
            case 2:
                checker.check(inputs.structuredPayload(), throwingToo: throwingToo)
            default:
                // Frame-level input, also checked as a whole payload.
                checker.check(inputs.rng.chance(2) ? inputs.eddystoneLikeFrame() : inputs.iBeaconLikeData(),
                              throwingToo: throwingToo)
            }
        }
        let elapsed = ContinuousClock.now - start
        print("fuzz: \(iterations) inputs, seed \(seed), \(elapsed); \(checker.summary)")

        #expect(checker.failures.isEmpty, "\(checker.failures.prefix(5))")
        // Guard against a generator that stops reaching the parsers.
        if iterations >= 100_000 {
            #expect(checker.parsedPayloads > iterations / 40)
            #expect(checker.parsedFrames > iterations / 100)
            #expect(checker.decodedURLs > iterations / 200)
        }
    }
}

/// Runs every parser on an input and checks the round-trip property,
/// recording failures instead of calling `#expect` per input (which would
/// dominate the run time).
struct RoundTripChecker {
    private(set) var failures: [String] = []
    private(set) var parsedPayloads = 0
    private(set) var parsedFrames = 0
    private(set) var parsedIBeacons = 0
    private(set) var decodedURLs = 0

    var summary: String {
        "payloads parsed \(parsedPayloads), Eddystone frames \(parsedFrames), "
            + "iBeacon data \(parsedIBeacons), URLs decoded \(decodedURLs)"
    }

    /// A value built by the library must come back unchanged.
    mutating func checkBuilt(_ frame: BeaconFrame) {
        let payload = frame.advertisingData
        if payload.count > 31 { fail("built payload of \(payload.count) bytes", payload) }
        if BeaconFrame.parse(advertisingData: payload) != frame { fail("built frame did not parse back", payload) }
    }

    /// Runs every parser on `input`. The internal `Result`-returning
    /// parsers carry the load (a throw costs a backtrace under
    /// swift-testing); `throwingToo` also runs the public throwing
    /// wrappers and checks they agree.
    mutating func check(_ input: [UInt8], throwingToo: Bool = false) {
        let payloadResult = BeaconFrame.parse(payload: input)
        if case let .success(frame) = payloadResult {
            parsedPayloads += 1
            let rebuilt = frame.advertisingData
            if BeaconFrame.parse(advertisingData: rebuilt) != frame { fail("payload round trip", input) }
        }
        let frameResult = BeaconFrame.parse(eddystoneFrame: input[...])
        if case let .success(frame) = frameResult {
            parsedFrames += 1
            if case .success(frame) = BeaconFrame.parse(eddystoneFrame: serviceData(of: frame)[...]) {} else {
                fail("service data round trip", input)
            }
        }
        let iBeaconResult = IBeacon.parse(manufacturerData: input[...])
        if case let .success(beacon) = iBeaconResult {
            parsedIBeacons += 1
            if case .success(beacon) = IBeacon.parse(manufacturerData: beacon.manufacturerData[...]) {} else {
                fail("manufacturer data round trip", input)
            }
        }
        let urlResult = EddystoneURL.decodeText(input[...])
        if case let .success(text) = urlResult {
            decodedURLs += 1
            let url = String(decoding: text, as: UTF8.self)
            let encoded = try? EddystoneURL.encode(url)
            if encoded.flatMap({ try? EddystoneURL.decode($0) }) != url { fail("URL round trip", input) }
            if let encoded, encoded.count > input.count { fail("encoding not shortest", input) }
        }
        if throwingToo {
            agree(payloadResult, Result { () throws(BeaconError) in try BeaconFrame(advertisingData: input) }, input)
            agree(frameResult, Result { () throws(BeaconError) in try BeaconFrame(eddystoneServiceData: input) }, input)
            agree(iBeaconResult, Result { () throws(BeaconError) in try IBeacon(manufacturerData: input) }, input)
            agree(urlResult.map { String(decoding: $0, as: UTF8.self) },
                  Result { () throws(BeaconError) in try EddystoneURL.decode(input) }, input)
        }
    }

    private mutating func agree<T: Equatable>(
        _ core: Result<T, BeaconError>, _ wrapper: Result<T, BeaconError>, _ input: [UInt8]
    ) {
        if core != wrapper { fail("throwing wrapper disagrees (\(T.self))", input) }
    }

    private func serviceData(of frame: BeaconFrame) -> [UInt8] {
        switch frame {
        case let .eddystoneUID(f): f.serviceData
        case let .eddystoneURL(f): f.serviceData
        case let .eddystoneTLM(f): f.serviceData
        case let .eddystoneEID(f): f.serviceData
        case .iBeacon: []
        }
    }

    mutating func fail(_ what: String, _ input: [UInt8]) {
        if failures.count < 100 {
            failures.append("\(what): \(input.map { String($0, radix: 16) }.joined(separator: " "))")
        }
    }
}
