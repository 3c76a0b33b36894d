import Crypto
import Foundation

/// Random identifiers and secrets, and the hashes under which secrets are kept.
/// The server stores only SHA-256 of API keys and device secrets: a stolen
/// database does not hand out credentials.
public enum Credentials {
    /// `count` bytes from the system CSPRNG (getrandom(2) on Linux).
    public static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    /// A device id: 16 random bytes, URL-safe base64 (22 characters).
    public static func newDeviceID() -> String { urlSafeBase64(randomBytes(16)) }

    /// A server process's id among the replicas, for its logs and events: 12 random bytes.
    static func newReplicaID() -> String { urlSafeBase64(randomBytes(12)) }

    /// A device secret or project key: 32 random bytes, URL-safe base64 (43
    /// characters), never starting with '-', which would read as an option
    /// where a key follows one on a command line (`--api-key KEY`).
    public static func newSecret() -> String {
        while true {
            let secret = urlSafeBase64(randomBytes(32))
            if secret.first != "-" { return secret }
        }
    }

    /// SHA-256 of the credential's UTF-8 text.
    public static func hash(_ credential: String) -> Data {
        Data(SHA256.hash(data: Data(credential.utf8)))
    }

    /// Base64 with `-` and `_` for `+` and `/`, without padding (RFC 4648 §5).
    static func urlSafeBase64(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
