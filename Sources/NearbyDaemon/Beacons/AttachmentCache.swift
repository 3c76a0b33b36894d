import Beacons

/// One attachment of a registered beacon, as the server hands it out.
struct BeaconAttachment: Hashable, Sendable {
    var namespace: String
    var type: String
    var data: [UInt8]
}

/// Where the watch learns a beacon's attachments: the server's
/// `beaconinfo:getforobserved`, asked with the app's API key.
protocol AttachmentSource: Sendable {
    /// The attachments of `beacon` that the project of `apiKey` may read under
    /// `namespacedType` (`*`, `ns/*` or `ns/type`); empty for a beacon that is
    /// not registered, inactive, or has none visible. Throws when the server
    /// cannot answer. `observedAtMs`: when the beacon was heard.
    func attachments(apiKey: String, namespacedType: String, beacon: AdvertisedID,
                     telemetry: [UInt8]?, observedAtMs: UInt64) async throws -> [BeaconAttachment]
}

/// The server's answers, each kept for a while, and the questions on their way.
/// Pure state: the watch asks it what to fetch and tells it what came back.
struct AttachmentCache {
    /// One question: a beacon's attachments for an API key and namespaced type.
    struct Key: Hashable {
        var apiKey: String
        var namespacedType: String
        var beacon: AdvertisedID
    }

    private enum Entry {
        /// An answer, good until `expires`; `refreshing` while asked again.
        case known([BeaconAttachment], expires: ContinuousClock.Instant, refreshing: Bool)
        /// Asked, no answer yet; should this fail, the next retry waits `delay`.
        case pending(delay: Duration)
        /// The server could not answer; ask again at `retry`.
        case failed(retry: ContinuousClock.Instant, delay: Duration)
    }

    let ttl: Duration
    let firstRetryDelay: Duration
    let maximumRetryDelay: Duration
    private var entries: [Key: Entry] = [:]

    init(ttl: Duration, firstRetryDelay: Duration = .seconds(1), maximumRetryDelay: Duration = .seconds(60)) {
        self.ttl = ttl
        self.firstRetryDelay = firstRetryDelay
        self.maximumRetryDelay = maximumRetryDelay
    }

    /// The attachments known for `key`, even if due for a refresh.
    func attachments(_ key: Key) -> [BeaconAttachment]? {
        if case .known(let attachments, _, _) = entries[key] { return attachments }
        return nil
    }

    /// Whether `key` should be asked now (unknown, expired, or due for a retry);
    /// if so it is marked as asked.
    mutating func shouldAsk(_ key: Key, at now: ContinuousClock.Instant) -> Bool {
        switch entries[key] {
        case nil:
            entries[key] = .pending(delay: firstRetryDelay)
            return true
        case .known(let attachments, let expires, let refreshing):
            guard !refreshing, now >= expires else { return false }
            entries[key] = .known(attachments, expires: expires, refreshing: true)
            return true
        case .pending:
            return false
        case .failed(let retry, let delay):
            guard now >= retry else { return false }
            entries[key] = .pending(delay: delay)
            return true
        }
    }

    /// The server's answer for `key`.
    mutating func answered(_ key: Key, _ attachments: [BeaconAttachment], at now: ContinuousClock.Instant) {
        entries[key] = .known(attachments, expires: now + ttl, refreshing: false)
    }

    /// The server could not answer: a known answer is kept and asked for again
    /// after the retry delay; otherwise the retry delay grows.
    mutating func failed(_ key: Key, at now: ContinuousClock.Instant) {
        switch entries[key] {
        case .known(let attachments, _, _):
            entries[key] = .known(attachments, expires: now + firstRetryDelay, refreshing: false)
        case .pending(let delay), .failed(_, let delay):
            entries[key] = .failed(retry: now + delay, delay: min(delay * 2, maximumRetryDelay))
        case nil:
            entries[key] = .failed(retry: now + firstRetryDelay, delay: min(firstRetryDelay * 2, maximumRetryDelay))
        }
    }

    /// Drops what is known about beacons not in `inRange` once it has expired,
    /// so the cache holds no more than the beacons around and the recent past.
    mutating func prune(keeping inRange: Set<AdvertisedID>, at now: ContinuousClock.Instant) {
        entries = entries.filter { key, entry in
            if inRange.contains(key.beacon) { return true }
            switch entry {
            case .known(_, let expires, let refreshing): return refreshing || now < expires
            case .pending: return true
            case .failed: return false
            }
        }
    }
}
