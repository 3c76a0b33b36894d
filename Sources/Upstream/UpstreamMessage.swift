import NearbyCore

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

    /// At most this many bytes of keys and values together (UTF-8).
    public static let maxDataBytes = 4096
    /// At most four weeks, as FCM allows.
    public static let maxTTLSeconds: Int64 = 2_419_200
    /// Message ids are 1...256 bytes.
    public static let maxMessageIDBytes = 256

    /// Checks the message against CCS's rules; each violation is a named
    /// `InvalidArguments` that says which field and why.
    public func validate() throws(NearbyError) {
        let size = data.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
        guard size <= Self.maxDataBytes else {
            throw .invalidArguments("data holds \(size) bytes of keys and values; at most \(Self.maxDataBytes) are sent")
        }
        for key in data.keys.sorted() {
            guard !key.isEmpty else { throw .invalidArguments("data has an empty key") }
            // CCS reserves these for itself.
            if key == "from" || key == "message_type" || key.hasPrefix("google") || key.hasPrefix("gcm") {
                throw .invalidArguments("data key '\(key)' is reserved ('from', 'message_type', and keys starting with 'google' or 'gcm')")
            }
        }
        guard Self.isServerAddress(to) else {
            throw .invalidArguments("to '\(to)' must be SENDER_ID@DOMAIN: a sender id of a-z, 0-9 and '-' (1 to 63), '@', and a host name")
        }
        guard !messageID.isEmpty, messageID.utf8.count <= Self.maxMessageIDBytes,
              !messageID.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .invalidArguments("message_id must be 1 to \(Self.maxMessageIDBytes) bytes without control characters")
        }
        guard (0...Self.maxTTLSeconds).contains(ttlSeconds) else {
            throw .invalidArguments("ttl_seconds \(ttlSeconds) must be within 0...\(Self.maxTTLSeconds) (four weeks)")
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
