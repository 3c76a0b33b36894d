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
    /// Connections open at once; further ones are closed as soon as accepted.
    public var maximumConnections: Int
    /// Time from accepting a connection to a bound resource (TLS handshake, SASL,
    /// bind); past it the stream ends with `connection-timeout`.
    public var negotiationTimeout: Duration
    /// Time a bound stream may stay silent (whitespace keepalives count as
    /// traffic) before it ends with `connection-timeout`; `nil`: no limit.
    public var idleTimeout: Duration?
    /// Failed SASL attempts allowed on one stream (RFC 6120 §6.4.5: 2 to 5
    /// retries); the last failure also ends the stream with `policy-violation`.
    public var maximumAuthenticationAttempts: Int
    /// Received stanzas that may wait for the service before the connection
    /// stops reading from the peer.
    public var maximumQueuedStanzas: Int

    public init(host: String, port: Int, domain: String, certificateChainPEM: String, privateKeyPEM: String,
                maximumStanzaBytes: Int = 65536, maximumConnections: Int = 1000, negotiationTimeout: Duration = .seconds(30),
                idleTimeout: Duration? = nil, maximumAuthenticationAttempts: Int = 3, maximumQueuedStanzas: Int = 64) {
        self.host = host
        self.port = port
        self.domain = domain
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
        self.maximumStanzaBytes = maximumStanzaBytes
        self.maximumConnections = maximumConnections
        self.negotiationTimeout = negotiationTimeout
        self.idleTimeout = idleTimeout
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
