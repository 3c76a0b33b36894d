// Fixed-size identifier types carried by Eddystone frames.
//
// Each wraps a byte array whose count is checked once at construction,
// so frames built from them can always be serialised without failing.

/// The 10-byte namespace half of an Eddystone-UID beacon id.
public struct EddystoneNamespace: Hashable, Sendable, CustomStringConvertible {
    /// Number of bytes in a namespace.
    public static let byteCount = 10
    /// The namespace bytes, exactly ``byteCount`` of them.
    public let bytes: [UInt8]

    /// Wraps `bytes`, which must be exactly 10 bytes long.
    public init(bytes: [UInt8]) throws(BeaconError) {
        self.bytes = try checked(bytes, count: Self.byteCount)
    }

    /// Parses 20 hex digits (dashes ignored), e.g. `"8b0ca750095477cb3e77"`.
    public init(hex: String) throws(BeaconError) {
        try self.init(bytes: BeaconHex.decode(hex))
    }

    init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    /// Lowercase hex, no separators.
    public var hex: String { BeaconHex.encode(bytes) }
    /// Same as ``hex``.
    public var description: String { hex }
}

/// The 6-byte instance half of an Eddystone-UID beacon id.
public struct EddystoneInstance: Hashable, Sendable, CustomStringConvertible {
    /// Number of bytes in an instance.
    public static let byteCount = 6
    /// The instance bytes, exactly ``byteCount`` of them.
    public let bytes: [UInt8]

    /// Wraps `bytes`, which must be exactly 6 bytes long.
    public init(bytes: [UInt8]) throws(BeaconError) {
        self.bytes = try checked(bytes, count: Self.byteCount)
    }

    /// Parses 12 hex digits (dashes ignored).
    public init(hex: String) throws(BeaconError) {
        try self.init(bytes: BeaconHex.decode(hex))
    }

    init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    /// Lowercase hex, no separators.
    public var hex: String { BeaconHex.encode(bytes) }
    /// Same as ``hex``.
    public var description: String { hex }
}

/// The 8-byte rotating ephemeral identifier of an Eddystone-EID frame.
public struct EddystoneEphemeralID: Hashable, Sendable, CustomStringConvertible {
    /// Number of bytes in an ephemeral id.
    public static let byteCount = 8
    /// The ephemeral id bytes, exactly ``byteCount`` of them.
    public let bytes: [UInt8]

    /// Wraps `bytes`, which must be exactly 8 bytes long.
    public init(bytes: [UInt8]) throws(BeaconError) {
        self.bytes = try checked(bytes, count: Self.byteCount)
    }

    /// Parses 16 hex digits (dashes ignored).
    public init(hex: String) throws(BeaconError) {
        try self.init(bytes: BeaconHex.decode(hex))
    }

    init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    /// Lowercase hex, no separators.
    public var hex: String { BeaconHex.encode(bytes) }
    /// Same as ``hex``.
    public var description: String { hex }
}

/// Returns `bytes` if it has exactly `count` elements.
private func checked(_ bytes: [UInt8], count: Int) throws(BeaconError) -> [UInt8] {
    guard bytes.count == count else {
        throw .invalidIdentifierLength(expected: count, actual: bytes.count)
    }
    return bytes
}
