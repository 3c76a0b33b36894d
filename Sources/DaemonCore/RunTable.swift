import NearbyCore

/// Where a publication's or subscription's nearby part runs.
public enum Placement: Sendable, Hashable {
    /// On every medium of its strategy; a scanning one listens fully.
    case foreground
    /// On BLE alone, listening with low power: audio never runs for a
    /// manager in the background.
    case background
}

/// How one publication or subscription runs now: what the daemon asks of the
/// mediums and the server link on its behalf.
public struct Run: Sendable, Hashable {
    /// Whose registration its traffic goes through (its server link).
    public var account: Account
    /// Its manager, by identity: the manager's error properties follow the
    /// mediums its objects use.
    public var manager: ObjectIdentifier
    public var strategy: Strategy
    /// Its nearby part (tokens through the server link): nil while it waits.
    public var nearby: Placement?
    /// Its beacon part (a subscription's `BeaconStrategy`) runs: it listens on BLE.
    public var beacons: Bool

    public init(account: Account, manager: ObjectIdentifier, strategy: Strategy, nearby: Placement?, beacons: Bool = false) {
        self.account = account
        self.manager = manager
        self.strategy = strategy
        self.nearby = nearby
        self.beacons = beacons
    }

    /// Neither part runs: the object waits (for permission, or the foreground).
    var waits: Bool { nearby == nil && !beacons }
}

/// How much of a server link's traffic on one medium the running objects ask for.
public struct LinkUsage: Sendable, Hashable {
    /// Objects that make the device heard: the link's token is broadcast.
    public var broadcasting = 0
    /// Objects that listen: what the medium hears is reported to the link.
    public var scanning = 0
    /// The listening objects in the foreground: while there are none the
    /// medium listens with low power.
    public var fullScanning = 0

    public init(broadcasting: Int = 0, scanning: Int = 0, fullScanning: Int = 0) {
        self.broadcasting = broadcasting
        self.scanning = scanning
        self.fullScanning = fullScanning
    }

    /// What the medium is asked to do for the link: the figures above, each
    /// only as "none" or "some".
    var wish: Wish { Wish(broadcasts: broadcasting > 0, scans: scanning > 0, scansFully: fullScanning > 0) }

    struct Wish: Equatable {
        var broadcasts: Bool
        var scans: Bool
        var scansFully: Bool
    }
}

/// How one part of an object (its nearby part, its beacon part) changed.
public enum PartChange: Sendable, Equatable {
    case unchanged
    /// It runs now, and did not: the server link or the beacon watch takes it up.
    case started
    /// It waits now, or ended: the server link drops it, or the beacon watch,
    /// and what it found through that part is forgotten.
    case stopped
}

/// What one object is, as far as running it goes.
public struct RunRequest: Sendable, Hashable {
    public var account: Account
    public var manager: ObjectIdentifier
    public var strategy: Strategy
    /// It has a nearby part (a publication; a subscription to nearby devices).
    public var nearby: Bool
    /// Its beacon part's `AllowInBackground`; nil: it has none.
    public var beaconsAllowInBackground: Bool?

    public init(account: Account, manager: ObjectIdentifier, strategy: Strategy, nearby: Bool = true,
                beaconsAllowInBackground: Bool? = nil) {
        self.account = account
        self.manager = manager
        self.strategy = strategy
        self.nearby = nearby
        self.beaconsAllowInBackground = beaconsAllowInBackground
    }
}

/// What reconciling an object did: each part's change, and what the table's change means for the rest.
public struct Transition: Sendable, Equatable {
    public var nearby = PartChange.unchanged
    public var beacons = PartChange.unchanged
    public var change = RunChange()

    public init() {}
}

/// What a change to the table changed for the daemon's other parts.
public struct RunChange: Sendable, Equatable {
    /// Some link's wish of some medium changed, or a beacon part started or
    /// stopped: the mediums are asked again.
    public var mediumsChanged = false
    /// The links that began to listen on mediums, which are told what those
    /// mediums already hear.
    public var startedListening: [Account: Set<Medium>] = [:]
    /// The managers whose set of mediums in use changed (their error properties).
    public var managers: Set<ObjectIdentifier> = []

    public init() {}
}

/// What runs, and where: the one record of which publications and
/// subscriptions use the mediums and the server links, by object id. Every
/// figure the daemon asks for (a link's use of a medium, the mediums a
/// manager's objects use) is derived from the runs held here; the totals are
/// kept only as a cache that ``set(_:to:)`` alone changes, by taking out an
/// object's old share and putting in its new one, so they cannot drift from
/// the runs (``recomputed()`` is what the tests hold them to).
public struct RunTable: Sendable {
    @_spi(Testing) public private(set) var runs: [String: Run] = [:]
    private var linkUsage: [Account: [Medium: LinkUsage]] = [:]
    private var managerMediums: [ObjectIdentifier: [Medium: Int]] = [:]

    public init() {}

    @_spi(Testing) public subscript(id: String) -> Run? { runs[id] }

    /// Its nearby part runs (through the server link), and where.
    public func nearby(_ id: String) -> Placement? { runs[id]?.nearby }

    /// Its beacon part runs.
    public func beaconsRun(_ id: String) -> Bool { runs[id]?.beacons ?? false }

    /// A link's use of a medium.
    @_spi(Testing) public func usage(of account: Account, on medium: Medium) -> LinkUsage {
        linkUsage[account]?[medium] ?? LinkUsage()
    }

    /// Whether anything of the link listens on the medium: a sighting there is reported to it.
    public func scans(_ account: Account, on medium: Medium) -> Bool {
        usage(of: account, on: medium).scanning > 0
    }

    /// The mediums the manager's running objects use, whatever their placement.
    public func mediums(usedBy manager: ObjectIdentifier) -> Set<Medium> {
        Set(managerMediums[manager, default: [:]].keys)
    }

    /// The object now runs as `run` (nil or waiting: not at all), and what that changed.
    @discardableResult
    @_spi(Testing) public mutating func set(_ id: String, to run: Run?) -> RunChange {
        let new = run.flatMap { $0.waits ? nil : $0 }
        let old = runs[id]
        guard old != new else { return RunChange() }
        // What the old run's and the new one's totals were before, as each
        // is first touched: a Publish passes here, so no more is looked at.
        var touched = Touched()
        if let old { apply(old, sign: -1, recording: &touched) }
        runs[id] = new
        if let new { apply(new, sign: 1, recording: &touched) }
        var change = RunChange()
        for (account, medium, before) in touched.links {
            let after = usage(of: account, on: medium).wish
            guard after != before else { continue }
            change.mediumsChanged = true
            if after.scans, !before.scans { change.startedListening[account, default: []].insert(medium) }
        }
        if (old?.beacons ?? false) != (new?.beacons ?? false) { change.mediumsChanged = true }
        for (manager, before) in touched.managers where usedMask(of: manager) != before {
            change.managers.insert(manager)
        }
        return change
    }

    /// Runs the object as its app's permission and its manager's background
    /// say (``Placement/of(permitted:background:allowInBackground:)``, for
    /// each part), and says what that started, stopped or moved.
    @discardableResult
    public mutating func reconcile(_ id: String, _ request: RunRequest, permitted: Bool, background: Bool) -> Transition {
        let nearby = request.nearby ? Placement.of(permitted: permitted, background: background,
                                                   allowInBackground: request.strategy.allowInBackground) : nil
        let beacons = request.beaconsAllowInBackground.map {
            Placement.of(permitted: permitted, background: background, allowInBackground: $0) != nil
        } ?? false
        return place(id, Run(account: request.account, manager: request.manager, strategy: request.strategy,
                             nearby: nearby, beacons: beacons))
    }

    /// The object ended: nothing of it runs any more.
    @discardableResult
    public mutating func end(_ id: String) -> Transition {
        place(id, nil)
    }

    private mutating func place(_ id: String, _ run: Run?) -> Transition {
        let before = runs[id]
        var transition = Transition()
        transition.change = set(id, to: run)
        let after = runs[id]
        transition.nearby = Self.part(before?.nearby != nil, after?.nearby != nil)
        transition.beacons = Self.part(before?.beacons ?? false, after?.beacons ?? false)
        return transition
    }

    private static func part(_ ran: Bool, _ runs: Bool) -> PartChange {
        ran == runs ? .unchanged : runs ? .started : .stopped
    }

    /// The totals as kept: a link's use of each medium it uses, and the
    /// mediums each manager's objects use. For the tests, which hold them to
    /// ``recomputed()``.
    @_spi(Testing) public struct Totals: Equatable, Sendable {
        public var links: [Account: [Medium: LinkUsage]]
        public var managers: [ObjectIdentifier: [Medium: Int]]
    }

    @_spi(Testing) public var totals: Totals { Totals(links: linkUsage, managers: managerMediums) }

    /// The totals worked out afresh from the runs: what ``totals`` must equal.
    @_spi(Testing) public func recomputed() -> Totals {
        var table = RunTable()
        var touched = Touched()
        for run in runs.values { table.apply(run, sign: 1, recording: &touched) }
        return table.totals
    }

    /// The totals a change touched, as they were before it.
    private struct Touched {
        var links: [(account: Account, medium: Medium, wish: LinkUsage.Wish)] = []
        var managers: [(manager: ObjectIdentifier, used: UInt8)] = []
    }

    /// The mediums a manager's objects use, one bit each.
    private func usedMask(of manager: ObjectIdentifier) -> UInt8 {
        var mask: UInt8 = 0
        if let used = managerMediums[manager] {
            for medium in used.keys { mask |= Self.bit(medium) }
        }
        return mask
    }

    private static func bit(_ medium: Medium) -> UInt8 {
        switch medium {
        case .ble: 1
        case .audio: 2
        }
    }

    /// Adds (`sign` 1) or takes out (-1) one run's share of the totals; a
    /// total that comes to nothing is dropped, so the totals hold only what is used.
    private mutating func apply(_ run: Run, sign: Int, recording touched: inout Touched) {
        if !touched.managers.contains(where: { $0.manager == run.manager }) {
            touched.managers.append((run.manager, usedMask(of: run.manager)))
        }
        if let placement = run.nearby {
            let foreground = placement == .foreground
            let mode = run.strategy.mode
            // Audio never runs for a manager in the background.
            for medium in run.strategy.mediums where foreground || medium != .audio {
                var usage = usage(of: run.account, on: medium)
                if !touched.links.contains(where: { $0.account == run.account && $0.medium == medium }) {
                    touched.links.append((run.account, medium, usage.wish))
                }
                if mode.broadcasts { usage.broadcasting += sign }
                if mode.scans {
                    usage.scanning += sign
                    if foreground { usage.fullScanning += sign }
                }
                linkUsage[run.account, default: [:]][medium] = usage == LinkUsage() ? nil : usage
            }
            for medium in run.strategy.mediums { count(medium, of: run.manager, by: sign) }
        }
        if run.beacons { count(.ble, of: run.manager, by: sign) }
        if linkUsage[run.account]?.isEmpty == true { linkUsage[run.account] = nil }
    }

    private mutating func count(_ medium: Medium, of manager: ObjectIdentifier, by sign: Int) {
        let users = managerMediums[manager, default: [:]][medium, default: 0] + sign
        managerMediums[manager, default: [:]][medium] = users == 0 ? nil : users
        if managerMediums[manager]?.isEmpty == true { managerMediums[manager] = nil }
    }
}

extension Placement {
    /// The one rule of whether and where an object runs: when its app is
    /// permitted, and its manager is in the foreground or it has
    /// `AllowInBackground` (then in the background). Nil: it waits.
    public static func of(permitted: Bool, background: Bool, allowInBackground: Bool) -> Placement? {
        guard permitted else { return nil }
        guard background else { return .foreground }
        return allowInBackground ? .background : nil
    }

    /// Why an object waits (`StatusReason` of `inactive`): what ``of(permitted:background:allowInBackground:)``
    /// decided, in words.
    public static func waitingReason(permitted: Bool) -> String {
        permitted ? "its manager is in the background, and it has no AllowInBackground"
            : "the app is not permitted to use Nearby (PermissionGranted)"
    }
}
