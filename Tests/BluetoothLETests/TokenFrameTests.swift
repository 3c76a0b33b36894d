import BluetoothLE
import NearbyCore
import Testing

@Suite struct TokenFrameTests {
    let token = Token(hex: "0011223344556677")!

    /// The bytes on the air, written out: length, AD type 0x21, the UUID
    /// 9a6bac06-7789-4cd3-b56f-cdcc43b8183b little-endian, the token.
    @Test func advertisingDataIsTheDocumentedBytes() {
        let expected: [UInt8] = [
            0x19, 0x21,
            0x3b, 0x18, 0xb8, 0x43, 0xcc, 0xcd, 0x6f, 0xb5, 0xd3, 0x4c, 0x89, 0x77, 0x06, 0xac, 0x6b, 0x9a,
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
        ]
        #expect(TokenFrame.advertisingData(for: token) == expected)
        // With the 3-byte Flags in front it fits a legacy advertisement.
        #expect(3 + expected.count <= 31)
    }

    @Test func theTokenIsReadBackWhereverTheStructureStands() {
        let frame = TokenFrame.advertisingData(for: token)
        #expect(TokenFrame.token(inAdvertisingData: frame) == token)
        let flags: [UInt8] = [0x02, 0x01, 0x04]
        let name: [UInt8] = [0x03, 0x09, 0x41, 0x42]
        #expect(TokenFrame.token(inAdvertisingData: flags + frame) == token)
        #expect(TokenFrame.token(inAdvertisingData: flags + name + frame + [0, 0, 0]) == token)
        #expect(TokenFrame.token(inServiceData: token.bytes) == token)
    }

    @Test func framesThatAreNotOursOrAreMalformedYieldNoToken() {
        let frame = TokenFrame.advertisingData(for: token)
        var otherUUID = frame
        otherUUID[2] ^= 0xff
        var shortToken = frame
        shortToken[0] -= 1
        shortToken.removeLast()
        var overrun = frame
        overrun[0] += 1
        var sixteenBit = frame
        sixteenBit[1] = 0x16
        let cases: [(String, [UInt8])] = [
            ("another UUID", otherUUID),
            ("a token one byte short", shortToken),
            ("a length past the end", overrun),
            ("16-bit service data", sixteenBit),
            ("empty", []),
            ("padding only", [0, 0, 0]),
            ("a lone length byte", [0x19]),
        ]
        for (name, data) in cases {
            #expect(TokenFrame.token(inAdvertisingData: data) == nil, "\(name)")
        }
        #expect(TokenFrame.token(inServiceData: Array(token.bytes.dropLast())) == nil)
    }

    /// Random advertisements (seeded): parsing never traps, and a token comes
    /// out only where nearbyd's UUID was put in.
    @Test func randomAdvertisementsNeverTrapOrMatchByChance() {
        var generator = SplitMix64(seed: 0x626c_6500)
        for _ in 0..<200_000 {
            let count = Int.random(in: 0...31, using: &generator)
            let data = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(TokenFrame.token(inAdvertisingData: data) == nil)
        }
    }
}
