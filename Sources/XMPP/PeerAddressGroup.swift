import NIOCore

/// What per-address limits count a peer by: its IPv4 address, or the /64
/// prefix of its IPv6 address (one host is commonly given a whole /64, so
/// counting single IPv6 addresses would limit nothing). An IPv4-mapped IPv6
/// address (`::ffff:a.b.c.d`) counts as the IPv4 address it carries; peers
/// without an IP address (Unix sockets) share one group.
public struct PeerAddressGroup: Hashable, Sendable, CustomStringConvertible {
    private enum Kind: Hashable {
        case v4(UInt32)
        case v6(prefix: UInt64)
        case other
    }

    private let kind: Kind

    /// The group of a peer at `address`.
    public init(_ address: SocketAddress?) {
        switch address {
        case .v4(let v4):
            kind = .v4(UInt32(bigEndian: v4.address.sin_addr.s_addr))
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
                kind = .v4(bytes[12...].reduce(0) { $0 << 8 | UInt32($1) })
            } else {
                kind = .v6(prefix: bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) })
            }
        case .unixDomainSocket, nil:
            kind = .other
        }
    }

    /// `192.0.2.7`, `2001:db8:0:1::/64`, or `local`.
    public var description: String {
        switch kind {
        case .v4(let address):
            return (0..<4).map { String(address >> (24 - 8 * $0) & 0xFF) }.joined(separator: ".")
        case .v6(let prefix):
            return (0..<4).map { String(prefix >> (48 - 16 * $0) & 0xFFFF, radix: 16) }.joined(separator: ":") + "::/64"
        case .other:
            return "local"
        }
    }
}
