import NearbyCore

/// Base16 for identifiers and error messages: NearbyCore's, with upper case
/// on request and the dashes of UUID-style strings skipped.
enum BeaconHex {
    /// Two hex digits for one byte.
    static func encode(_ byte: UInt8, uppercase: Bool = false) -> String {
        encode([byte], uppercase: uppercase)
    }

    /// Hex digits for `bytes`, two per byte, no separators.
    static func encode(_ bytes: [UInt8], uppercase: Bool = false) -> String {
        uppercase ? Hex.encode(bytes).uppercased() : Hex.encode(bytes)
    }

    /// Bytes for an even number of hex digits (either case), dashes skipped.
    static func decode(_ text: String) throws(BeaconError) -> [UInt8] {
        guard let bytes = Hex.decode(String(text.filter { $0 != "-" })) else { throw .invalidHex(text) }
        return bytes
    }
}
