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
    /// Its strategy's mediums, one bit each (``Medium/bit``), and mode: of
    /// the strategy, only what running needs. A run is copied a few times
    /// on each change, and the strategy's `Set` would be counted each time.
    private var mediumBits: UInt8
    public var mode: DiscoveryMode
    /// Its nearby part (tokens through the server link): nil while it waits.
    public var nearby: Placement?
    /// Its beacon part (a subscription's `BeaconStrategy`) runs: it listens on BLE.
    public var beacons: Bool

    public init(account: Account, manager: ObjectIdentifier, strategy: Strategy, nearby: Placement?, beacons: Bool = false) {
        self.account = account
        self.manager = manager
        mediumBits = strategy.mediums.reduce(0) { $0 | $1.bit }
        mode = strategy.mode
        self.nearby = nearby
        self.beacons = beacons
    }

    /// Whether its strategy has `medium`.
    func uses(_ medium: Medium) -> Bool { mediumBits & medium.bit != 0 }

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

/// What runs, and where: which publications and subscriptions use the
/// mediums and the server links. Each object's run is kept in the object
/// (``Publication/run``, ``Subscription/run``), where running and ending it
/// hash nothing, and changes only here, through ``reconcile(_:_:permitted:background:)``
/// and ``end(_:)``. Every figure the daemon asks for (a link's use of a
/// medium, the mediums a manager's objects use) is derived from those runs;
/// the table keeps the totals only as a cache that each change updates by
/// taking out the object's old share and putting in its new one, so they
/// cannot drift from the runs (``recomputed(from:)`` is what the tests hold
/// them to).
public struct RunTable: Sendable {
    // A Publish and an Unpublish each pass here: one entry per link and per
    // manager, each medium a field, so a change hashes the account once to
    // read and once to write, and allocates nothing.
    private var linkUsage: [Account: MediumUsages] = [:]
    private var managerMediums: [ObjectIdentifier: MediumUsers] = [:]

    public init() {}

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
        Set(Medium.allCases.filter { managerMediums[manager]?[$0] ?? 0 > 0 })
    }

    /// The object whose run is `slot` now runs as `run` (nil or waiting: not
    /// at all), and what that changed.
    @discardableResult
    @_spi(Testing) public mutating func set(_ slot: inout Run?, to run: Run?) -> RunChange {
        update(&slot, to: run).change
    }

    /// Which parts of an object run.
    private struct Parts: Equatable {
        var nearby = false
        var beacons = false

        init(_ run: Run?) {
            nearby = run?.nearby != nil
            beacons = run?.beacons ?? false
        }
    }

    /// ``set(_:to:)``, with which parts ran before and run after.
    private mutating func update(_ slot: inout Run?, to run: Run?) -> (before: Parts, after: Parts, change: RunChange) {
        let new = run.flatMap { $0.waits ? nil : $0 }
        let old = slot
        slot = new
        let (before, after) = (Parts(old), Parts(new))
        guard old != new else { return (before, after, RunChange()) }
        let taken = old.map { apply($0, sign: -1) }
        let given = new.map { apply($0, sign: 1) }
        var change = RunChange()
        // An object's runs keep its account and manager: then the first share's
        // "before" and the last one's "after" are the whole change.
        if let old, let new, old.account == new.account, old.manager == new.manager, let taken, let given {
            change.record(new.account, from: taken.link?.before ?? given.link?.before, to: given.link?.after ?? taken.link?.after)
            change.record(new.manager, from: taken.used.before, to: given.used.after)
        } else {
            // Made or ended (one share), or, never in practice, moved between accounts or managers.
            if let old, let taken { change.record(old, taken) }
            if let new, let given { change.record(new, given) }
        }
        if before.beacons != after.beacons { change.mediumsChanged = true }
        return (before, after, change)
    }

    /// Runs the object as its app's permission and its manager's background
    /// say (``Placement/of(permitted:background:allowInBackground:)``, for
    /// each part), and says what that started, stopped or moved.
    /// `slot` is the object's run (``Publication/run``).
    @discardableResult
    public mutating func reconcile(_ slot: inout Run?, _ request: RunRequest, permitted: Bool, background: Bool) -> Transition {
        let nearby = request.nearby ? Placement.of(permitted: permitted, background: background,
                                                   allowInBackground: request.strategy.allowInBackground) : nil
        let beacons = request.beaconsAllowInBackground.map {
            Placement.of(permitted: permitted, background: background, allowInBackground: $0) != nil
        } ?? false
        return place(&slot, Run(account: request.account, manager: request.manager, strategy: request.strategy,
                                nearby: nearby, beacons: beacons))
    }

    /// The object whose run is `slot` ended: nothing of it runs any more.
    @discardableResult
    public mutating func end(_ slot: inout Run?) -> Transition {
        place(&slot, nil)
    }

    private mutating func place(_ slot: inout Run?, _ run: Run?) -> Transition {
        let (before, after, change) = update(&slot, to: run)
        var transition = Transition()
        transition.change = change
        transition.nearby = Self.part(before.nearby, after.nearby)
        transition.beacons = Self.part(before.beacons, after.beacons)
        return transition
    }

    private static func part(_ ran: Bool, _ runs: Bool) -> PartChange {
        ran == runs ? .unchanged : runs ? .started : .stopped
    }

    /// The totals as kept: a link's use of each medium it uses, and the
    /// mediums each manager's objects use. For the tests, which hold them to
    /// ``recomputed(from:)``.
    @_spi(Testing) public struct Totals: Equatable, Sendable {
        public var links: [Account: [Medium: LinkUsage]]
        public var managers: [ObjectIdentifier: [Medium: Int]]
    }

    @_spi(Testing) public var totals: Totals {
        func used<Value: Equatable>(_ value: (Medium) -> Value, unless none: Value) -> [Medium: Value] {
            Dictionary(uniqueKeysWithValues: Medium.allCases.map { ($0, value($0)) }.filter { $0.1 != none })
        }
        return Totals(links: linkUsage.mapValues { usages in used({ usages[$0] }, unless: LinkUsage()) },
                      managers: managerMediums.mapValues { users in used({ users[$0] }, unless: 0) })
    }

    /// The totals worked out afresh from every object's run: what ``totals`` must equal.
    @_spi(Testing) public static func recomputed(from runs: some Sequence<Run>) -> Totals {
        var table = RunTable()
        for run in runs { table.apply(run, sign: 1) }
        return table.totals
    }

    /// What taking out or putting in one run's share did to its link's usages
    /// (nil: its nearby part does not run, and it touched none) and its
    /// manager's mediums, before and after.
    fileprivate struct Share {
        var link: (before: MediumUsages, after: MediumUsages)?
        var used: (before: UInt8, after: UInt8)
    }

    /// Adds (`sign` 1) or takes out (-1) one run's share of the totals; a
    /// total that comes to nothing is dropped, so the totals hold only what is used.
    @discardableResult
    private mutating func apply(_ run: Run, sign: Int) -> Share {
        var link: (before: MediumUsages, after: MediumUsages)?
        if let placement = run.nearby {
            let foreground = placement == .foreground
            let mode = run.mode
            link = Self.change(&linkUsage, run.account, none: .none) { usages in
                // Audio never runs for a manager in the background.
                for medium in Medium.allCases where run.uses(medium) && (foreground || medium != .audio) {
                    if mode.broadcasts { usages[medium].broadcasting += sign }
                    if mode.scans {
                        usages[medium].scanning += sign
                        if foreground { usages[medium].fullScanning += sign }
                    }
                }
            }
        }
        let users = Self.change(&managerMediums, run.manager, none: .none) { users in
            if run.nearby != nil {
                for medium in Medium.allCases where run.uses(medium) { users[medium] += sign }
            }
            if run.beacons { users[.ble] += sign }
        }
        return Share(link: link, used: (users.before.mask, users.after.mask))
    }

    /// Changes `key`'s entry in place, hashing the key once where the entry
    /// stays (a new one is added, one that comes to nothing is dropped);
    /// returns it before and after.
    private static func change<Key, Value: Equatable>(_ table: inout [Key: Value], _ key: Key, none: Value,
                                                      _ body: (inout Value) -> Void) -> (before: Value, after: Value) {
        guard let index = table.index(forKey: key) else {
            var value = none
            body(&value)
            if value != none { table[key] = value }
            return (none, value)
        }
        let before = table.values[index]
        body(&table.values[index])
        let after = table.values[index]
        if after == none { table.remove(at: index) }
        return (before, after)
    }
}

extension RunChange {
    /// What one run's share changed.
    fileprivate mutating func record(_ run: Run, _ share: RunTable.Share) {
        record(run.account, from: share.link?.before, to: share.link?.after)
        record(run.manager, from: share.used.before, to: share.used.after)
    }

    /// A link's usages went from `before` to `after` (nil: none).
    fileprivate mutating func record(_ account: Account, from before: MediumUsages?, to after: MediumUsages?) {
        guard let before, let after, before != after else { return }
        for medium in Medium.allCases {
            let (was, now) = (before[medium].wish, after[medium].wish)
            guard was != now else { continue }
            mediumsChanged = true
            if now.scans, !was.scans { startedListening[account, default: []].insert(medium) }
        }
    }

    /// A manager's mediums in use went from `before` to `after` (one bit each).
    fileprivate mutating func record(_ manager: ObjectIdentifier, from before: UInt8, to after: UInt8) {
        if before != after { managers.insert(manager) }
    }
}

/// A value for each medium, as fields: a change to one hashes nothing.
private struct PerMedium<Value: Equatable & Sendable>: Equatable, Sendable {
    var ble: Value
    var audio: Value

    subscript(medium: Medium) -> Value {
        get {
            switch medium {
            case .ble: ble
            case .audio: audio
            }
        }
        set {
            switch medium {
            case .ble: ble = newValue
            case .audio: audio = newValue
            }
        }
    }
}

/// A link's use of each medium.
private typealias MediumUsages = PerMedium<LinkUsage>

/// How many of a manager's running objects use each medium.
private typealias MediumUsers = PerMedium<Int>

extension Medium {
    /// One bit per medium, for sets of them kept in a byte (``Run``).
    var bit: UInt8 {
        switch self {
        case .ble: 1
        case .audio: 2
        }
    }
}

extension PerMedium where Value == LinkUsage {
    /// No use of any medium: the table keeps no such entry.
    static var none: PerMedium { PerMedium(ble: LinkUsage(), audio: LinkUsage()) }
}

extension PerMedium where Value == Int {
    /// No object uses any medium: the table keeps no such entry.
    static var none: PerMedium { PerMedium(ble: 0, audio: 0) }

    /// The mediums in use, one bit each.
    var mask: UInt8 { (ble > 0 ? Medium.ble.bit : 0) | (audio > 0 ? Medium.audio.bit : 0) }
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
