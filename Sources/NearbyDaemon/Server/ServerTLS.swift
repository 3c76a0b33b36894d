import Foundation
import NIOSSL

/// How nearbyd checks nearby-server's certificate on an `https://` URL:
/// against the system's CA store, or only the CAs of `[server] ca-file`;
/// TLS 1.2 or newer either way.
enum ServerTLS {
    /// The largest CA file read: a system's whole bundle is about 200 KiB.
    static let maxCAFileBytes = 1 << 20

    /// The TLS configuration of the REST calls and WebSockets to `url`;
    /// nil for `http://`.
    static func configuration(url: String, caFile: String?) throws(ServerTLSError) -> TLSConfiguration? {
        guard url.hasPrefix("https://") else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let caFile { configuration.trustRoots = .certificates(try certificates(in: caFile)) }
        return configuration
    }

    /// The certificates of a PEM file, read only if it is a regular file of
    /// reasonable size (a configuration naming a device or a pipe must not hang nearbyd).
    static func certificates(in path: String) throws(ServerTLSError) -> [NIOSSLCertificate] {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else {
            throw ServerTLSError("[server] ca-file: cannot read \(path)")
        }
        guard attributes[.type] as? FileAttributeType == .typeRegular,
              let size = attributes[.size] as? Int, size <= maxCAFileBytes else {
            throw ServerTLSError("[server] ca-file: \(path) is not a regular file of at most \(maxCAFileBytes) bytes")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ServerTLSError("[server] ca-file: cannot read \(path)")
        }
        let certificates = try? NIOSSLCertificate.fromPEMBytes(Array(data.prefix(maxCAFileBytes)))
        guard let certificates, !certificates.isEmpty else {
            throw ServerTLSError("[server] ca-file: \(path) holds no PEM certificate")
        }
        return certificates
    }

    /// Says what went wrong with TLS, in words for the person reading the
    /// journal or `nearbyctl status`; nil when `error` is no TLS failure.
    static func explain(_ error: any Error, caFile: String?) -> String? {
        let trusted = caFile.map { "the CAs of [server] ca-file (\($0))" } ?? "the system's CA store"
        let untrusted = "the server's TLS certificate is not trusted: it does not chain to \(trusted), or does not name the server's host"
        switch error {
        case NIOSSLError.handshakeFailed(let reason) where "\(reason)".contains("CERTIFICATE_VERIFY_FAILED"):
            return "\(untrusted) (\(reason))"
        case NIOSSLError.unableToValidateCertificate:
            return "\(untrusted) (\(error))"
        case let extra as NIOSSLExtraError where extra == .failedToValidateHostname:
            return "\(untrusted) (\(error))"
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            return "the TLS handshake with the server failed (\(error))"
        default:
            return nil
        }
    }
}

/// A `[server]` TLS setting nearbyd cannot use: it does not start.
struct ServerTLSError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}
