import NearbyCore
import Beacons

/// Generators for the fuzz test: valid frames, their mutations, and
/// random but structure-aware advertising payloads.
struct FuzzInputs {
    var rng: SplitMix64

    // MARK: Valid frames

    /// A random valid frame of any kind; nil only if a decoded URL could
    /// not be re-encoded, which is itself a failure the caller reports.
    mutating func validFrame() -> BeaconFrame? {
        switch rng.below(5) {
        case 0:
            return .eddystoneUID(EddystoneUID(
                txPower: Int8(bitPattern: rng.byte()),
                namespace: try! EddystoneNamespace(bytes: rng.bytes(10)),
                instance: try! EddystoneInstance(bytes: rng.bytes(6))))
        case 1:
            let url = try! EddystoneURL.decode([UInt8(rng.below(4))] + urlBody(rng.inRange(0...17)))
            return (try? EddystoneURL(txPower: Int8(bitPattern: rng.byte()), url: url)).map(BeaconFrame.eddystoneURL)
        case 2:
            return .eddystoneTLM(EddystoneTLM(
                batteryVoltage: rng.chance(8) ? 0 : UInt16(truncatingIfNeeded: rng.next()),
                temperatureFixedPoint: rng.chance(8) ? Int16.min : Int16(truncatingIfNeeded: rng.next()),
                advertisingPDUCount: UInt32(truncatingIfNeeded: rng.next()),
                uptimeDeciseconds: UInt32(truncatingIfNeeded: rng.next())))
        case 3:
            return .eddystoneEID(EddystoneEID(
                txPower: Int8(bitPattern: rng.byte()),
                ephemeralID: try! EddystoneEphemeralID(bytes: rng.bytes(8))))
        default:
            var manufacturer: [UInt8] = [0x4C, 0x00, 0x02, 0x15]
            manufacturer += rng.bytes(21)
            return .iBeacon(try! IBeacon(manufacturerData: manufacturer))
        }
    }

    /// Encoded-URL bytes drawn from the legal alphabet, biased towards
    /// "." and expansion codes so the shortest-encoding search has work.
    mutating func urlBody(_ count: Int) -> [UInt8] {
        var out: [UInt8] = []
        for _ in 0..<count {
            switch rng.below(8) {
            case 0: out.append(UInt8(rng.below(14)))       // expansion code
            case 1: out.append(UInt8(ascii: "."))
            case 2: out.append(rng.pick(Array("comrgeduntifbzvw/".utf8)))
            default: out.append(UInt8(0x21 + rng.below(0x7F - 0x21)))
            }
        }
        return out
    }

    // MARK: Inputs

    /// Uniformly random bytes, 0...40 long.
    mutating func randomBytes() -> [UInt8] {
        rng.bytes(rng.inRange(0...40))
    }

    /// A valid payload after one to three random edits.
    mutating func mutated(_ payload: [UInt8]) -> [UInt8] {
        var bytes = payload
        for _ in 0...rng.below(3) {
            switch rng.below(6) {
            case 0 where !bytes.isEmpty:  // bit flip
                let i = rng.below(bytes.count)
                bytes[i] ^= 1 << UInt8(rng.below(8))
            case 1:  // truncation
                bytes.removeLast(rng.inRange(0...bytes.count))
            case 2:  // extension
                bytes += rng.bytes(rng.inRange(1...8))
            case 3 where !bytes.isEmpty:  // overwrite
                bytes[rng.below(bytes.count)] = rng.byte()
            case 4:  // insertion
                bytes.insert(rng.byte(), at: rng.inRange(0...bytes.count))
            case 5 where !bytes.isEmpty:  // deletion
                bytes.remove(at: rng.below(bytes.count))
            default:
                break
            }
        }
        return bytes
    }

    /// One to four AD structures, mostly well formed, whose contents look
    /// like beacons often enough to reach the frame parsers.
    mutating func structuredPayload() -> [UInt8] {
        var out: [UInt8] = []
        for _ in 0...rng.below(4) {
            var structure: [UInt8]
            switch rng.below(6) {
            case 0: structure = [0x01, 0x06]
            case 1:  // 16-bit UUID list, sometimes odd, usually naming 0xFEAA
                structure = [rng.pick([0x02, 0x03, 0x14])]
                structure += rng.chance(4) ? rng.bytes(rng.inRange(0...5)) : [0xAA, 0xFE]
            case 2, 3:  // Eddystone service data
                structure = [0x16, 0xAA, 0xFE] + eddystoneLikeFrame()
            case 4:  // manufacturer data, iBeacon-like or not
                structure = [0xFF] + iBeaconLikeData()
            default:
                structure = [rng.byte()] + rng.bytes(rng.inRange(0...6))
            }
            var length = structure.count
            if rng.chance(10) { length += rng.pick([-1, 1, -2, 2]) }
            out.append(UInt8(truncatingIfNeeded: length))
            out += structure
        }
        if rng.chance(8) { out += [UInt8](repeating: 0, count: rng.inRange(1...4)) }
        return out
    }

    /// A frame-type byte (usually a known one) and a body near a legal length.
    mutating func eddystoneLikeFrame() -> [UInt8] {
        let type = rng.chance(8) ? rng.byte() : rng.pick([0x00, 0x10, 0x20, 0x30] as [UInt8])
        switch type {
        case 0x10:
            return [type, rng.byte(), rng.chance(8) ? rng.byte() : UInt8(rng.below(4))]
                + urlBody(rng.inRange(0...18))
        case 0x20:
            let version: UInt8 = rng.chance(4) ? rng.pick([0x01, 0x02, rng.byte()]) : 0x00
            return [type, version] + rng.bytes(rng.pick([12, 12, 12, 11, 13, 16]))
        default:
            return [type] + rng.bytes(rng.pick([9, 17, 19, 19, 18, 16, 21]))
        }
    }

    /// Manufacturer data with Apple's header most of the time.
    mutating func iBeaconLikeData() -> [UInt8] {
        var header: [UInt8] = [0x4C, 0x00, 0x02, 0x15]
        if rng.chance(6) { header[rng.below(4)] = rng.byte() }
        return header + rng.bytes(rng.pick([21, 21, 21, 20, 22, 0]))
    }
}
