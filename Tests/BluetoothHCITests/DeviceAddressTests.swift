import BluetoothHCI
import NearbyCore
import Testing

@Suite struct DeviceAddressTests {
    /// Core spec v5.3, Vol 6, Part B, §1.3.2.2: top two bits 0b00, the other
    /// 46 bits neither all zeros nor all ones.
    @Test func nonResolvablePrivateAddressesHaveTheRequiredForm() {
        var generator = SplitMix64(seed: 0x6e72_7061)
        var seen = Set<DeviceAddress>()
        for _ in 0..<10_000 {
            let address = DeviceAddress.nonResolvablePrivate(using: &generator)
            #expect(address.bytes.count == 6)
            #expect(address.bytes[5] & 0xC0 == 0x00)
            #expect(address.isNonResolvablePrivate)
            seen.insert(address)
        }
        // Fresh each time: no repeats that would link two tokens.
        #expect(seen.count == 10_000)
    }

    @Test func theSameSeedGivesTheSameAddresses() {
        var first = SplitMix64(seed: 42)
        var second = SplitMix64(seed: 42)
        var other = SplitMix64(seed: 43)
        let a = (0..<5).map { _ in DeviceAddress.nonResolvablePrivate(using: &first) }
        let b = (0..<5).map { _ in DeviceAddress.nonResolvablePrivate(using: &second) }
        let c = (0..<5).map { _ in DeviceAddress.nonResolvablePrivate(using: &other) }
        #expect(a == b)
        #expect(a != c)
    }

    /// All zeros and all ones (after the sub-type bits are cleared) are drawn again.
    @Test func allZerosAndAllOnesAreRejected() {
        var generator = Scripted(values: [0, 0x3FFF_FFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF, 0xC000_0000_0000, 0x1234_5678_9ABC])
        let address = DeviceAddress.nonResolvablePrivate(using: &generator)
        #expect(address.bytes == [0xBC, 0x9A, 0x78, 0x56, 0x34, 0x12])
        #expect(address.description == "12:34:56:78:9A:BC")
        #expect(generator.index == 5)
    }

    @Test func otherAddressesAreNotNonResolvablePrivate() {
        #expect(DeviceAddress(littleEndian: [0, 0, 0, 0, 0, 0])?.isNonResolvablePrivate == false)
        #expect(DeviceAddress(littleEndian: [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F])?.isNonResolvablePrivate == false)
        // A static random address: top bits 0b11.
        #expect(DeviceAddress(littleEndian: [1, 2, 3, 4, 5, 0xC6])?.isNonResolvablePrivate == false)
        #expect(DeviceAddress(littleEndian: [1, 2, 3, 4, 5]) == nil)
    }
}

/// Returns the given values in order.
struct Scripted: RandomNumberGenerator {
    let values: [UInt64]
    var index = 0

    init(values: [UInt64]) {
        self.values = values
    }

    mutating func next() -> UInt64 {
        defer { index += 1 }
        return values[index]
    }
}
