import Foundation
import NIOSSL
import XMPP

/// The PEM files a listener serves TLS with, as the configuration names them.
enum TLSFiles {
    /// The text of the file at `path`; `setting` names it in the error.
    static func read(_ path: String, _ setting: String) throws(TLSFileError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TLSFileError(message: "\(setting): cannot read \(path)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// A server context (``TLSServerContext``) with the chain and key of
    /// `section`'s `certificate` and `private-key`.
    static func serverContext(certificatePath: String, privateKeyPath: String, section: String) throws(TLSFileError) -> NIOSSLContext {
        let chainPEM = try read(certificatePath, "\(section) certificate")
        let keyPEM = try read(privateKeyPath, "\(section) private-key")
        do {
            return try TLSServerContext.make(certificateChainPEM: chainPEM, privateKeyPEM: keyPEM)
        } catch is TLSServerContext.NoCertificate {
            throw TLSFileError(message: "\(section) certificate: no certificate in \(certificatePath)")
        } catch {
            throw TLSFileError(message: "\(section) certificate and private-key (\(certificatePath), \(privateKeyPath)) are no usable pair: \(error)")
        }
    }
}

/// A certificate or key file that cannot serve: named by its setting and path.
struct TLSFileError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
