import NIOSSL

/// The TLS every listener of ours serves with: the given chain and key, TLS
/// 1.2 or newer, BoringSSL's default ciphers, no client certificates. The
/// XMPP server uses it, and nearby-server's HTTP API too.
public enum TLSServerContext {
    /// The chain's PEM holds no certificate.
    public struct NoCertificate: Error, CustomStringConvertible {
        public var description: String { "no certificate in the chain PEM" }
    }

    public static func make(certificateChainPEM: String, privateKeyPEM: String) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(certificateChainPEM.utf8))
        guard !chain.isEmpty else { throw NoCertificate() }
        let key = try NIOSSLPrivateKey(bytes: Array(privateKeyPEM.utf8), format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                                     privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        return try NIOSSLContext(configuration: configuration)
    }
}
