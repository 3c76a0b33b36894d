/// CRC-24 with the OpenPGP parameters (RFC 4880 §6.1: polynomial 0x864CFB,
/// initial value 0xB704CE, most significant bit first). The non-zero initial
/// value keeps an all-zero frame from being a valid one.
enum CRC24 {
    static let bitCount = 24

    /// The CRC of `bits` (one bit per element, 0 or 1), most significant bit first.
    static func checksum(_ bits: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xB7_04CE
        for bit in bits {
            let top = (crc >> 23) & 1
            crc = (crc << 1) & 0xFF_FFFF
            if top ^ UInt32(bit) == 1 { crc ^= 0x86_4CFB }
        }
        return crc
    }

    /// `bits` followed by their CRC's 24 bits.
    static func appending(to bits: [UInt8]) -> [UInt8] {
        let crc = checksum(bits)
        return bits + (0..<bitCount).map { UInt8((crc >> (23 - UInt32($0))) & 1) }
    }

    /// Whether the last 24 of `bits` are the CRC of the ones before.
    static func isValid(_ bits: [UInt8]) -> Bool {
        guard bits.count > bitCount else { return false }
        let payload = bits.prefix(bits.count - bitCount)
        let crc = checksum(payload)
        return zip(bits.suffix(bitCount), 0..<bitCount).allSatisfy { bit, i in
            UInt32(bit) == (crc >> (23 - UInt32(i))) & 1
        }
    }
}
