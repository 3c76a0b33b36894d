/// Whose registration with nearby-server an app's traffic goes through: one
/// per user and API key. The API key is public (it ships inside every app)
/// and an AppId is whatever the caller says, so the uid is what keeps one
/// user's messages, verdicts, message ids and server quotas from another's.
public struct Account: Hashable, Sendable, CustomStringConvertible {
    public let uid: UInt32
    public let apiKey: String
    /// The key's hash, worked out once. An account keys several tables that
    /// every Publish and Unpublish reads (the server links and their use of
    /// the mediums), and hashing the whole key each time cost more than the
    /// rest of each look-up. Seeded per process like every `Hasher`, so no
    /// one outside can choose keys that collide.
    private let keyHash: Int

    public init(uid: UInt32, apiKey: String) {
        self.uid = uid
        self.apiKey = apiKey
        keyHash = apiKey.hashValue
    }

    public static func == (lhs: Account, rhs: Account) -> Bool {
        lhs.uid == rhs.uid && lhs.keyHash == rhs.keyHash && lhs.apiKey == rhs.apiKey
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(uid)
        hasher.combine(keyHash)
    }

    /// For logs: the uid and the start of the key (the whole key is a secret of sorts).
    public var description: String { "uid \(uid), key \(apiKey.prefix(4))…" }
}
