/// The PROXY protocol version 2 header that a load balancer (haproxy's
/// `send-proxy-v2`) puts before a connection's first byte to say whose it
/// is: read from the bytes at a connection's start, nothing else.
///
/// Version 2 only: it is binary, of a length stated up front, and what
/// haproxy, nginx and the cloud balancers send; version 1 (a text line) is
/// refused by name. A header that says `LOCAL` (the balancer's own health
/// check) or gives no address of the internet families (`UNSPEC`) leaves
/// the connection its own address, as the specification asks; one of a
/// UNIX socket is a local client.
enum ProxyProtocolHeader {
    /// The twelve bytes every version 2 header begins with.
    static let signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
    /// Signature, version and command, family and transport, length.
    static let fixedBytes = 16

    enum Verdict: Equatable {
        /// More bytes are needed.
        case incomplete
        /// The header is the first `consumed` bytes; the client is `client`,
        /// or the connection's own peer when nil.
        case complete(consumed: Int, client: ClientAddress?)
        /// Not a header this server takes; the sentence says why.
        case refused(String)
    }

    /// Reads the header at the start of `bytes`, which are all the
    /// connection has sent so far; a header longer than `maxBytes` in all is
    /// refused as soon as its length is known.
    static func parse(_ bytes: some Collection<UInt8>, maxBytes: Int) -> Verdict {
        // Refuse at the first byte that cannot begin a header, so a client
        // that is not a balancer learns at once.
        for (byte, expected) in zip(bytes, signature) where byte != expected {
            return bytes.starts(with: "PROXY ".utf8)
                ? .refused("a PROXY protocol version 1 header: version 2 is required (haproxy: send-proxy-v2)")
                : .refused("no PROXY protocol version 2 header")
        }
        guard bytes.count >= fixedBytes else { return .incomplete }
        let header = Array(bytes.prefix(fixedBytes))
        let length = Int(header[14]) << 8 | Int(header[15])
        guard header[12] >> 4 == 2 else { return .refused("a PROXY protocol header of version \(header[12] >> 4), not 2") }
        guard fixedBytes + length <= maxBytes else {
            return .refused("a PROXY protocol header of \(fixedBytes + length) bytes, more than the \(maxBytes) taken")
        }
        guard bytes.count >= fixedBytes + length else { return .incomplete }
        let consumed = fixedBytes + length
        switch header[12] & 0x0F {
        case 0: return .complete(consumed: consumed, client: nil)  // LOCAL
        case 1: break  // PROXY
        default: return .refused("a PROXY protocol header with the unknown command \(header[12] & 0x0F)")
        }
        let addresses = Array(bytes.dropFirst(fixedBytes).prefix(length))
        switch header[13] >> 4 {
        case 0:
            return .complete(consumed: consumed, client: nil)
        case 1:
            guard length >= 12 else { return .refused("a PROXY protocol header too short for its IPv4 addresses") }
            return .complete(consumed: consumed, client: ClientAddress(ipv4: addresses[0..<4]))
        case 2:
            guard length >= 36 else { return .refused("a PROXY protocol header too short for its IPv6 addresses") }
            return .complete(consumed: consumed, client: ClientAddress(ipv6: addresses[0..<16]))
        case 3:
            guard length >= 216 else { return .refused("a PROXY protocol header too short for its UNIX socket addresses") }
            return .complete(consumed: consumed, client: ClientAddress("local"))
        default:
            return .refused("a PROXY protocol header with the unknown address family \(header[13] >> 4)")
        }
    }
}
