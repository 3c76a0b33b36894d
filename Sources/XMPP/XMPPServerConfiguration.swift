/// Where and how an ``XMPPServer`` listens.
public struct XMPPServerConfiguration: Sendable {
    /// The listen address, e.g. "127.0.0.1".
    public var host: String
    /// The listen port; 0 takes any free port (``XMPPServer/start()`` returns it).
    public var port: Int
    /// The server's XMPP domain, e.g. "gcm.nearbyd.test": a client's stream must be
    /// addressed to it (`to`), and a SASL username without `@` is taken as a JID in it.
    public var domain: String
    /// The TLS certificate chain, PEM, leaf first.
    public var certificateChainPEM: String
    /// The certificate's private key, PEM.
    public var privateKeyPEM: String
    /// Bytes one stanza may take on the wire; a longer one ends the stream with
    /// `policy-violation`. CCS messages carry at most 4 KiB of data, so the
    /// default of 64 KiB leaves room for any escaping and envelope.
    public var maximumStanzaBytes: Int
    /// Authenticated connections at once. A connection counts from its SASL
    /// success; one more is refused then, with the stream error
    /// `resource-constraint`.
    public var maximumConnections: Int
    /// Authenticated connections of one user (a bare JID: a project's sender
    /// ID) at once, within ``maximumConnections``: so that one user's
    /// connections can never take every place from the others. One more is
    /// refused like one beyond ``maximumConnections``.
    public var maximumConnectionsPerUser: Int
    /// Connections not yet authenticated (in their TLS handshake, or
    /// negotiating the stream) at once. A new connection is always taken; at
    /// the limit the slowest of the address holding the most is closed for it
    /// (``ConnectionAdmission``).
    public var maximumUnauthenticatedConnections: Int
    /// Connections not yet authenticated from one ``PeerAddressGroup`` (an IPv4
    /// address, an IPv6 /64) at once; at the limit the group's slowest is closed
    /// for a new one.
    public var maximumUnauthenticatedConnectionsPerAddress: Int
    /// Time from accepting a connection to the end of its TLS handshake; past it
    /// the connection is closed.
    public var tlsHandshakeTimeout: Duration
    /// Time from the end of the TLS handshake to a bound resource (stream
    /// header, SASL, bind); past it the stream ends with `connection-timeout`.
    public var negotiationTimeout: Duration
    /// Time a bound stream may stay silent (whitespace keepalives count as
    /// traffic) before the server pings it (XEP-0199), which any XMPP client
    /// answers (RFC 6120 §8.2.3).
    public var idleTimeout: Duration
    /// Time a pinged stream has to send anything; past it the stream ends with
    /// `connection-timeout`.
    public var pingTimeout: Duration
    /// Failed SASL attempts allowed on one stream (RFC 6120 §6.4.5: 2 to 5
    /// retries); the last failure also ends the stream with `policy-violation`.
    public var maximumAuthenticationAttempts: Int
    /// Received stanzas that may wait for the service before the connection
    /// stops reading from the peer.
    public var maximumQueuedStanzas: Int

    public init(host: String, port: Int, domain: String, certificateChainPEM: String, privateKeyPEM: String,
                maximumStanzaBytes: Int = 65536, maximumConnections: Int = 1000, maximumConnectionsPerUser: Int = 100,
                maximumUnauthenticatedConnections: Int = 256, maximumUnauthenticatedConnectionsPerAddress: Int = 32,
                tlsHandshakeTimeout: Duration = .seconds(10), negotiationTimeout: Duration = .seconds(20),
                idleTimeout: Duration = .seconds(120), pingTimeout: Duration = .seconds(30),
                maximumAuthenticationAttempts: Int = 3, maximumQueuedStanzas: Int = 64) {
        self.host = host
        self.port = port
        self.domain = domain
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
        self.maximumStanzaBytes = maximumStanzaBytes
        self.maximumConnections = maximumConnections
        self.maximumConnectionsPerUser = maximumConnectionsPerUser
        self.maximumUnauthenticatedConnections = maximumUnauthenticatedConnections
        self.maximumUnauthenticatedConnectionsPerAddress = maximumUnauthenticatedConnectionsPerAddress
        self.tlsHandshakeTimeout = tlsHandshakeTimeout
        self.negotiationTimeout = negotiationTimeout
        self.idleTimeout = idleTimeout
        self.pingTimeout = pingTimeout
        self.maximumAuthenticationAttempts = maximumAuthenticationAttempts
        self.maximumQueuedStanzas = maximumQueuedStanzas
    }
}

/// What an ``XMPPServer`` calls: authentication, then one ``serve(_:)`` per bound session.
public protocol XMPPService: Sendable {
    /// SASL PLAIN with the authentication identity as a bare JID (e.g.
    /// "myproject@gcm.nearbyd.test"; a client that sends only "myproject" gets the
    /// server's domain added) and password. Returns true to accept.
    func authenticate(username: String, password: String) async -> Bool
    /// Runs one bound session; the session ends when this returns (the server then
    /// closes the stream with `</stream:stream>` if not closed yet) or when the peer
    /// closes (then `session.stanzas` finishes). Should return soon after
    /// `session.stanzas` finishes.
    func serve(_ session: XMPPSession) async
}

/// XML namespaces of XMPP.
enum Namespace {
    static let client = "jabber:client"
    static let stream = "http://etherx.jabber.org/streams"
    static let sasl = "urn:ietf:params:xml:ns:xmpp-sasl"
    static let bind = "urn:ietf:params:xml:ns:xmpp-bind"
    static let session = "urn:ietf:params:xml:ns:xmpp-session"
    static let stanzas = "urn:ietf:params:xml:ns:xmpp-stanzas"
    static let ping = "urn:xmpp:ping"
}
