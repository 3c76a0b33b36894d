/// A stream-level error condition (RFC 6120 §4.9.3). Stream errors are
/// unrecoverable: the stream ends right after one is sent.
/// (`see-other-host` is left out: it needs a host, and this server never redirects.)
public enum StreamError: String, Error, Sendable, CaseIterable {
    case badFormat = "bad-format"
    case badNamespacePrefix = "bad-namespace-prefix"
    case conflict
    case connectionTimeout = "connection-timeout"
    case hostGone = "host-gone"
    case hostUnknown = "host-unknown"
    case improperAddressing = "improper-addressing"
    case internalServerError = "internal-server-error"
    case invalidFrom = "invalid-from"
    case invalidNamespace = "invalid-namespace"
    case invalidXML = "invalid-xml"
    case notAuthorized = "not-authorized"
    case notWellFormed = "not-well-formed"
    case policyViolation = "policy-violation"
    case remoteConnectionFailed = "remote-connection-failed"
    case reset
    case resourceConstraint = "resource-constraint"
    case restrictedXML = "restricted-xml"
    case systemShutdown = "system-shutdown"
    case undefinedCondition = "undefined-condition"
    case unsupportedEncoding = "unsupported-encoding"
    case unsupportedFeature = "unsupported-feature"
    case unsupportedStanzaType = "unsupported-stanza-type"
    case unsupportedVersion = "unsupported-version"

    static let namespace = "urn:ietf:params:xml:ns:xmpp-streams"

    /// The condition's element name, e.g. `not-well-formed`.
    public var condition: String { rawValue }

    /// `<stream:error>` with this condition and an optional human-readable text
    /// (in the stream's `stream` prefix, which the server's header declares).
    public func xml(text: String? = nil) -> String {
        var out = "<stream:error><\(condition) xmlns='\(Self.namespace)'/>"
        if let text {
            out += XMLElement("text", namespace: Self.namespace, attributes: ["xml:lang": "en"], text: text).xml
        }
        return out + "</stream:error>"
    }
}
