import NearbyCore
import ServerAPI

/// A message a program sends upstream, to its application server:
/// `SendMessage` of `org.nearbyd.Upstream1`, in the shape of Firebase Cloud
/// Messaging's upstream messages (CCS).
public struct UpstreamMessage: Hashable, Sendable, Codable {
    /// The payload: string keys to string values.
    public var data: [String: String]
    /// The application server: `SENDER_ID@DOMAIN`.
    public var to: String
    /// Unique for the sending app among its pending messages.
    public var messageID: String
    /// How long it may wait for the channel, seconds; 0: now or never.
    public var ttlSeconds: Int64

    public init(data: [String: String], to: String, messageID: String, ttlSeconds: Int64) {
        self.data = data
        self.to = to
        self.messageID = messageID
        self.ttlSeconds = ttlSeconds
    }

    /// Checks the message against CCS's rules (``CCSRules``, which the
    /// server checks too); each violation is a named `InvalidArguments` that
    /// says which field and why.
    public func validate() throws(NearbyError) {
        if let problem = CCSRules.dataProblem(data) { throw .invalidArguments(problem) }
        guard Self.isServerAddress(to) else {
            throw .invalidArguments("to '\(to)' must be SENDER_ID@DOMAIN: a sender id of a-z, 0-9 and '-' (1 to 63), '@', and a host name")
        }
        guard CCSRules.isID(messageID) else {
            throw .invalidArguments("message_id must be 1 to \(CCSRules.maximumIDBytes) bytes without control characters")
        }
        guard (0...Int64(CCSRules.maximumTimeToLiveSeconds)).contains(ttlSeconds) else {
            throw .invalidArguments("ttl_seconds \(ttlSeconds) must be within 0...\(CCSRules.maximumTimeToLiveSeconds) (four weeks)")
        }
    }

    /// `SENDER_ID@DOMAIN`: the sender id is a project's name (what its API key
    /// and its app servers' login share), the domain a host name.
    static func isServerAddress(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...63).contains(parts[0].utf8.count), (1...253).contains(parts[1].utf8.count) else { return false }
        let sender = parts[0].unicodeScalars
        guard sender.first != "-", sender.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }) else {
            return false
        }
        return parts[1].split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            (1...63).contains(label.utf8.count) && label.first != "-" && label.last != "-"
                && label.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-") }
        }
    }
}
