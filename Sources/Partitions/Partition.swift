/// The partitions a deployment's devices are divided into: each device
/// belongs to one, by a hash of its id that every replica and every version
/// computes alike, and each partition is owned by one live replica at a time
/// (``OwnershipCore``).
///
/// The count is fixed: a device's partition must not move when replicas come
/// and go, only the partition's owner does. 256 spreads devices over up to a
/// few dozen replicas within a few per cent of an even share.
public enum Partition {
    /// How many partitions there are.
    public static let count = 256

    /// The partition of the device with this id: its UTF-8 bytes' CRC-32
    /// (IEEE 802.3, as zlib and haproxy's `crc32` compute it) modulo
    /// ``count``.
    public static func of(device id: String) -> Int {
        Int(CRC32.checksum(id.utf8) % UInt32(count))
    }
}

/// CRC-32 of IEEE 802.3 (reflected polynomial 0xEDB88320, initial value and
/// final XOR 0xFFFFFFFF): the check value of "123456789" is 0xCBF43926.
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { byte in
        var crc = UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        return crc
    }

    static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = (crc >> 8) ^ table[Int((crc ^ UInt32(byte)) & 0xFF)] }
        return crc ^ 0xFFFF_FFFF
    }
}
