// Fixed-size identifier types carried by Eddystone frames.

/// An identifier of a fixed number of bytes, checked when it is made, so
/// frames built from it always serialise.
public protocol FixedSizeIdentifier: Hashable, Sendable, CustomStringConvertible {
    /// Number of bytes in the identifier.
    static var byteCount: Int { get }
    /// Exactly ``byteCount`` bytes.
    var bytes: [UInt8] { get }
    /// Wraps bytes known to be ``byteCount`` long (a precondition): what a
    /// parser that has checked the frame's length uses.
    init(exactly bytes: [UInt8])
}

extension FixedSizeIdentifier {
    /// Wraps `bytes`; a wrong length is ``BeaconError/invalidIdentifierLength(expected:actual:)``.
    public init(bytes: [UInt8]) throws(BeaconError) {
        guard bytes.count == Self.byteCount else {
            throw .invalidIdentifierLength(expected: Self.byteCount, actual: bytes.count)
        }
        self.init(exactly: bytes)
    }

    /// Parses two hex digits per byte (dashes ignored), e.g. `"8b0ca750095477cb3e77"`.
    public init(hex: String) throws(BeaconError) {
        try self.init(bytes: BeaconHex.decode(hex))
    }

    /// Lowercase hex, no separators.
    public var hex: String { BeaconHex.encode(bytes) }
    /// Same as ``hex``.
    public var description: String { hex }
}

/// The 10-byte namespace half of an Eddystone-UID beacon id.
public struct EddystoneNamespace: FixedSizeIdentifier {
    public static let byteCount = 10
    public let bytes: [UInt8]

    public init(exactly bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount)
        self.bytes = bytes
    }
}

/// The 6-byte instance half of an Eddystone-UID beacon id.
public struct EddystoneInstance: FixedSizeIdentifier {
    public static let byteCount = 6
    public let bytes: [UInt8]

    public init(exactly bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount)
        self.bytes = bytes
    }
}

/// The 8-byte rotating ephemeral identifier of an Eddystone-EID frame.
public struct EddystoneEphemeralID: FixedSizeIdentifier {
    public static let byteCount = 8
    public let bytes: [UInt8]

    public init(exactly bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount)
        self.bytes = bytes
    }
}
