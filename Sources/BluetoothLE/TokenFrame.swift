import NearbyCore

/// How nearbyd carries its token over BLE, for every backend (BlueZ and raw
/// HCI): one advertising-data structure of 128-bit-UUID service data (AD type
/// 0x21) under nearbyd's own service UUID, followed by the 8-byte token.
///
///     19 21 <service UUID, 16 bytes, little-endian> <token, 8 bytes>
///
/// That is 26 bytes; with the 3-byte Flags structure the kernel or the
/// controller puts in front, 29 of the legacy advertisement's 31. No 16-bit
/// UUID is free to use without buying one from the Bluetooth SIG, so the UUID
/// is a random (version 4) one, fixed here for good.
///
/// Scanners cannot ask bluetoothd to filter on it: a discovery filter's UUIDs
/// match service-UUID lists only, not service-data UUIDs (doc/architecture.md,
/// "BLE: what the backends rely on", Discovery filter), so nearbyd scans
/// unfiltered and picks its frames out itself.
public enum TokenFrame {
    /// nearbyd's BLE service UUID.
    public static let serviceUUID = "9a6bac06-7789-4cd3-b56f-cdcc43b8183b"

    /// The UUID's 16 bytes in the little-endian order of advertising data.
    public static let serviceUUIDLittleEndian: [UInt8] = {
        let hex = serviceUUID.filter { $0 != "-" }
        let bigEndian = stride(from: 0, to: hex.count, by: 2).map { offset -> UInt8 in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
        return bigEndian.reversed()
    }()

    /// AD type "Service Data - 128-bit UUID".
    public static let serviceData128: UInt8 = 0x21

    /// The advertising data for `token` (no Flags; 26 bytes).
    public static func advertisingData(for token: Token) -> [UInt8] {
        let payload = [serviceData128] + serviceUUIDLittleEndian + token.bytes
        return [UInt8(payload.count)] + payload
    }

    /// The token in an advertisement's data (any AD structures, in any order),
    /// or nil when it carries none of nearbyd's, or is malformed: a length
    /// that runs past the end rejects the whole advertisement.
    public static func token(inAdvertisingData data: [UInt8]) -> Token? {
        var index = 0
        var found: Token?
        while index < data.count {
            let length = Int(data[index])
            // A zero length ends the significant part (the rest is padding).
            if length == 0 { break }
            guard index + 1 + length <= data.count else { return nil }
            let type = data[index + 1]
            let value = Array(data[(index + 2)..<(index + 1 + length)])
            if type == serviceData128, found == nil {
                found = token(inServiceData128: value)
            }
            index += 1 + length
        }
        return found
    }

    /// The token in the service data BlueZ reports under ``serviceUUID``
    /// (`Device1.ServiceData`: the bytes after the UUID), or nil when it is not
    /// exactly one token long.
    public static func token(inServiceData data: [UInt8]) -> Token? {
        Token(bytes: data)
    }

    /// A 128-bit service data value (UUID then data) holding nearbyd's token.
    private static func token(inServiceData128 value: [UInt8]) -> Token? {
        guard value.count == 16 + Token.byteCount, Array(value[..<16]) == serviceUUIDLittleEndian else { return nil }
        return Token(bytes: Array(value[16...]))
    }
}
