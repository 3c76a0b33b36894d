/// One hearing of a token on a medium.
public struct Sighting: Hashable, Sendable, Codable {
    public var token: Token
    public var medium: Medium
    public var rssi: Int
    public var txPower: Int?
    public var distanceMeters: Double
    /// Wall-clock time of the hearing, milliseconds since the epoch.
    public var seenAtMilliseconds: UInt64

    public init(token: Token, medium: Medium, rssi: Int, txPower: Int?, distanceMeters: Double,
                seenAtMilliseconds: UInt64) {
        self.token = token
        self.medium = medium
        self.rssi = rssi
        self.txPower = txPower
        self.distanceMeters = distanceMeters
        self.seenAtMilliseconds = seenAtMilliseconds
    }

    /// A hearing at `rssi` of a transmitter whose strength at one metre is
    /// `txPower`, its distance estimated by free-space path loss. An unknown
    /// strength (virtual controllers report none) is taken as one metre.
    public init(token: Token, medium: Medium, rssi: Int?, txPower: Int, seenAtMilliseconds: UInt64) {
        let rssi = rssi ?? txPower
        self.init(token: token, medium: medium, rssi: rssi, txPower: txPower,
                  distanceMeters: PathLoss.distance(rssi: rssi, txPower: txPower), seenAtMilliseconds: seenAtMilliseconds)
    }

    public var key: Key { Key(token: token, medium: medium) }

    /// A token on a medium: what is found and lost.
    public struct Key: Hashable, Sendable, Codable {
        public var token: Token
        public var medium: Medium

        public init(token: Token, medium: Medium) {
            self.token = token
            self.medium = medium
        }
    }
}

/// Decides which hearings the server needs to know of: a token heard for the
/// first time (at once), one still heard (every `refreshInterval`, so the
/// server keeps it), and one not heard for `lostTimeout` (gone).
public struct SightingTracker: Sendable {
    public let lostTimeout: Duration
    public let refreshInterval: Duration
    /// Mediums with a timeout of their own (audio: its bursts are seconds apart).
    public let lostTimeouts: [Medium: Duration]
    private var heard: [Sighting.Key: (sighting: Sighting, lastHeard: ContinuousClock.Instant, lastReported: ContinuousClock.Instant)] = [:]

    public init(lostTimeout: Duration, refreshInterval: Duration, lostTimeouts: [Medium: Duration] = [:]) {
        self.lostTimeout = lostTimeout
        self.refreshInterval = refreshInterval
        self.lostTimeouts = lostTimeouts
    }

    private func timeout(_ key: Sighting.Key) -> Duration { lostTimeouts[key.medium] ?? lostTimeout }

    /// Records a hearing; returns it if it should be reported now.
    public mutating func heard(_ sighting: Sighting, at now: ContinuousClock.Instant) -> Sighting? {
        if let known = heard[sighting.key], now - known.lastReported < refreshInterval {
            heard[sighting.key] = (sighting, now, known.lastReported)
            return nil
        }
        heard[sighting.key] = (sighting, now, now)
        return sighting
    }

    /// Removes and returns the tokens not heard for the lost timeout.
    public mutating func expire(at now: ContinuousClock.Instant) -> [Sighting.Key] {
        let gone = heard.filter { now - $0.value.lastHeard >= timeout($0.key) }.map(\.key)
        for key in gone { heard.removeValue(forKey: key) }
        return gone
    }

    /// When the next token will time out if not heard again, if any is heard.
    public var nextExpiry: ContinuousClock.Instant? {
        heard.map { $0.value.lastHeard + timeout($0.key) }.min()
    }

    /// Every token currently heard, with its latest hearing.
    public var current: [Sighting] { heard.values.map(\.sighting) }
}
