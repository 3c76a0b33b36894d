// Fixed-offset field access for frame parsers and builders.
//
// Parsers work on `ArraySlice<UInt8>` so AD structures can be handed over
// without copying; slices keep their parent's indices, so every read here
// is relative to `startIndex`. Callers check lengths first: these helpers
// trap on out-of-range offsets like any array access.

extension ArraySlice where Element == UInt8 {
    /// The byte `offset` bytes into the slice.
    @inline(__always)
    func byte(at offset: Int) -> UInt8 {
        self[startIndex + offset]
    }

    /// A signed byte (dBm values are two's complement Int8).
    @inline(__always)
    func int8(at offset: Int) -> Int8 {
        Int8(bitPattern: self[startIndex + offset])
    }

    /// A big-endian UInt16 starting `offset` bytes in.
    func uint16BE(at offset: Int) -> UInt16 {
        UInt16(byte(at: offset)) << 8 | UInt16(byte(at: offset + 1))
    }

    /// A little-endian UInt16 (Bluetooth's own byte order, e.g. UUIDs and company ids).
    func uint16LE(at offset: Int) -> UInt16 {
        UInt16(byte(at: offset)) | UInt16(byte(at: offset + 1)) << 8
    }

    /// A big-endian UInt32 starting `offset` bytes in.
    func uint32BE(at offset: Int) -> UInt32 {
        UInt32(uint16BE(at: offset)) << 16 | UInt32(uint16BE(at: offset + 2))
    }

    /// A copy of `count` bytes starting `offset` bytes in.
    func bytes(at offset: Int, count: Int) -> [UInt8] {
        Array(self[(startIndex + offset)..<(startIndex + offset + count)])
    }
}

extension Array where Element == UInt8 {
    /// Appends `value` most significant byte first.
    mutating func appendBigEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends `value` most significant byte first.
    mutating func appendBigEndian(_ value: UInt32) {
        appendBigEndian(UInt16(truncatingIfNeeded: value >> 16))
        appendBigEndian(UInt16(truncatingIfNeeded: value))
    }

    /// Appends `value` least significant byte first.
    mutating func appendLittleEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value))
        append(UInt8(truncatingIfNeeded: value >> 8))
    }

    /// Appends a signed byte as its two's complement bit pattern.
    mutating func appendSigned(_ value: Int8) {
        append(UInt8(bitPattern: value))
    }
}
