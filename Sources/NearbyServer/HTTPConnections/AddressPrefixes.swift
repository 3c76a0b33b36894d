import ConfigFile
#if canImport(Glibc)
import Glibc
#endif
import NIOCore

/// A list of IP addresses and prefixes (`127.0.0.1`, `10.0.0.0/8`, `::1`,
/// `fd00::/8`), as `[http] proxy-protocol-from` gives the load balancers
/// whose PROXY protocol header is believed.
struct AddressPrefixes: Sendable, Equatable {
    private struct Prefix: Sendable, Equatable {
        /// 4 or 16 bytes, in network order.
        let bytes: [UInt8]
        let length: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == bytes.count else { return false }
            var remaining = length
            for (a, b) in zip(address, bytes) where remaining > 0 {
                let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
                if a & mask != b & mask { return false }
                remaining -= 8
            }
            return true
        }
    }

    private let prefixes: [Prefix]
    /// The entries as written, for messages.
    let written: [String]

    /// Parses each entry; `what` names the setting in the error.
    init(_ entries: [String], what: String) throws(ConfigurationError) {
        var prefixes: [Prefix] = []
        for entry in entries {
            let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard let bytes = Self.bytes(of: parts[0]) else {
                throw ConfigurationError("\(what): '\(entry)' is not an IP address or prefix (for example 10.0.0.1, 10.0.0.0/8, fd00::/8)")
            }
            let length: Int
            if parts.count == 2 {
                guard let value = Int(parts[1]), (0...bytes.count * 8).contains(value) else {
                    throw ConfigurationError("\(what): '\(entry)' has a prefix length that is not 0 to \(bytes.count * 8)")
                }
                length = value
            } else {
                length = bytes.count * 8
            }
            prefixes.append(Prefix(bytes: bytes, length: length))
        }
        self.prefixes = prefixes
        written = entries
    }

    /// No address at all.
    static let none = AddressPrefixes()

    private init() {
        prefixes = []
        written = []
    }

    var isEmpty: Bool { prefixes.isEmpty }

    /// Whether `address` is in one of the prefixes; an IPv4 client on a
    /// dual-stack socket (`::ffff:a.b.c.d`) counts as its IPv4 address.
    func contains(_ address: SocketAddress?) -> Bool {
        let bytes: [UInt8]
        switch address {
        case .v4(let v4)?:
            bytes = withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6)?:
            let all = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            bytes = all[0..<10].allSatisfy { $0 == 0 } && all[10] == 0xFF && all[11] == 0xFF ? Array(all[12...]) : all
        case .unixDomainSocket?, nil:
            return false
        }
        return prefixes.contains { $0.contains(bytes) }
    }

    private static func bytes(of text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }
}
