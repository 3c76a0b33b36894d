/// A 48-bit Bluetooth device address, as HCI carries it: six bytes, least
/// significant first (`bdaddr_t` in bluetooth.h).
public struct DeviceAddress: Hashable, Sendable, CustomStringConvertible {
    /// The six bytes in wire (little-endian) order.
    public let bytes: [UInt8]

    /// `bytes` in wire order; nil unless there are exactly six.
    public init?(littleEndian bytes: [UInt8]) {
        guard bytes.count == 6 else { return nil }
        self.bytes = bytes
    }

    /// The usual notation, most significant byte first: `3F:12:AB:00:01:02`.
    public var description: String {
        bytes.reversed().map { byte in
            let digits = Array("0123456789ABCDEF")
            return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]])
        }.joined(separator: ":")
    }

    /// The 46 bits after the two sub-type bits of a random address.
    private static let randomPartMask: UInt64 = 0x3FFF_FFFF_FFFF

    /// A fresh non-resolvable private address (Core spec v5.3, Vol 6, Part B,
    /// §1.3.2.2): the two most significant bits are 0b00 and the other 46 bits
    /// are random, neither all zeros nor all ones. Nothing links it to the
    /// device or to the previous one, which is why the advertiser takes a new
    /// one with each token: two tokens from one address would be linked.
    ///
    /// (The spec also asks that it differ from the public address; the chance
    /// that 46 random bits equal it is 2⁻⁴⁶, and a public address's top bits
    /// are an OUI's, seldom 0b00.)
    public static func nonResolvablePrivate(using generator: inout some RandomNumberGenerator) -> DeviceAddress {
        var value: UInt64
        repeat {
            value = generator.next() & randomPartMask
        } while value == 0 || value == randomPartMask
        return DeviceAddress(littleEndian: (0..<6).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) })!
    }

    /// Whether this is a well-formed non-resolvable private address.
    public var isNonResolvablePrivate: Bool {
        let value = bytes.enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
        return value >> 46 == 0 && value != 0 && value != Self.randomPartMask
    }
}
