import NearbyCore

/// The rules of Firebase Cloud Messaging's XMPP connection server (CCS) for
/// a message's data, ids and time to live, in one place: nearbyd checks an
/// app's upstream message against them before it keeps it (`SendMessage`),
/// and nearby-server checks what devices send on their channel and what
/// application servers send downstream.
public enum CCSRules {
    /// The most bytes of keys and values (UTF-8) a message's data holds.
    public static let maximumDataBytes = 4096
    /// Four weeks: the longest (and the default) time to live, in seconds.
    public static let maximumTimeToLiveSeconds = 2_419_200
    /// The longest message id, app id or registration id, in bytes.
    public static let maximumIDBytes = 256

    /// The bytes of `data`'s keys and values together (UTF-8).
    public static func dataBytes(_ data: [String: String]) -> Int {
        data.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
    }

    /// Whether CCS keeps `key` for itself: `from`, `message_type`, and any
    /// key that starts with `google` or `gcm`.
    public static func isReserved(_ key: String) -> Bool {
        key == "from" || key == "message_type" || key.hasPrefix("google") || key.hasPrefix("gcm")
    }

    /// What is wrong with `data`, in words for the sender, or nil: more than
    /// ``maximumDataBytes``, or an empty or reserved key (the first in order).
    public static func dataProblem(_ data: [String: String]) -> String? {
        let size = dataBytes(data)
        guard size <= maximumDataBytes else {
            return "data holds \(size) bytes of keys and values; at most \(maximumDataBytes) are allowed"
        }
        if let key = data.keys.sorted().first(where: { $0.isEmpty || isReserved($0) }) {
            return key.isEmpty ? "data has an empty key"
                : "data key '\(key)' is reserved ('from', 'message_type', and keys starting with 'google' or 'gcm')"
        }
        return nil
    }

    /// An id as CCS carries it and the server keeps it (in text columns,
    /// which in PostgreSQL cannot hold a NUL, and in logs and payloads): 1 to
    /// ``maximumIDBytes`` bytes, no control characters.
    public static func isID(_ text: String) -> Bool {
        (1...maximumIDBytes).contains(text.utf8.count) && TextRule.refused(in: text, .name) == nil
    }
}
