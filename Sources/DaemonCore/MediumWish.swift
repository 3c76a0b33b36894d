import NearbyCore

/// What one medium is asked to do: the tokens to broadcast, and how hard to listen.
public struct MediumWish: Equatable, Sendable {
    public var tokens: Set<Token>
    public var scanMode: ScanMode

    public init(tokens: Set<Token> = [], scanMode: ScanMode = .off) {
        self.tokens = tokens
        self.scanMode = scanMode
    }

    /// What `medium` is asked for by what runs: the token of every link
    /// whose objects broadcast on it, and the fullest listening any asks
    /// (full while one of a link's listening objects is in the foreground,
    /// low power while all are in the background). `beacons` is how the beacon
    /// subscriptions listen (BLE only). `tokens` are each link's token, a
    /// sequence rather than a table so that the core, which asks on every
    /// change of what runs where, hands its links over without building one.
    public static func of(_ medium: Medium, runs: RunTable, tokens: some Sequence<(key: Account, value: Token?)>,
                          beacons: ScanMode = .off) -> MediumWish {
        var wish = MediumWish(scanMode: medium == .ble ? beacons : .off)
        for (account, token) in tokens {
            let usage = runs.usage(of: account, on: medium)
            if usage.broadcasting > 0, let token { wish.tokens.insert(token) }
            if usage.fullScanning > 0 {
                wish.scanMode = .full
            } else if usage.scanning > 0 {
                wish.scanMode = max(wish.scanMode, .lowPower)
            }
        }
        return wish
    }

    /// It asks for at least what `other` did (every token, as much
    /// listening): asked of the medium at once. Asking less waits a short
    /// grace, so a burst of publications coming and going does not toggle
    /// the radio each time.
    public func covers(_ other: MediumWish) -> Bool {
        tokens.isSuperset(of: other.tokens) && scanMode >= other.scanMode
    }
}
