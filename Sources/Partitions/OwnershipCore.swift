/// A live replica, as the membership table shows it.
public struct Member: Sendable, Hashable {
    /// The replica's id, new at each start.
    public var id: String
    /// Where devices reach it (`[replication] advertised-url`).
    public var url: String

    public init(id: String, url: String) {
        self.id = id
        self.url = url
    }
}

/// A partition's lease, as storage lists it: who holds it, if anyone, and
/// whether the lease is still running by the database's clock.
public struct Lease: Sendable, Hashable {
    public var partition: Int
    public var owner: String?
    public var live: Bool

    public init(partition: Int, owner: String?, live: Bool) {
        self.partition = partition
        self.owner = owner
        self.live = live
    }
}

/// What one round asks of storage: leases to renew, to take, and to give up.
public struct LeaseRound: Sendable, Equatable {
    public var renew: [Int]
    public var claim: [Int]
    public var release: [Int]

    public var isEmpty: Bool { renew.isEmpty && claim.isEmpty && release.isEmpty }
}

/// What a round changed in the partitions this replica owns.
public struct OwnershipChange: Sendable, Equatable {
    public var gained: Set<Int> = []
    public var lost: Set<Int> = []

    public var isEmpty: Bool { gained.isEmpty && lost.isEmpty }
}

/// Decides which partitions this replica holds, round by round, from the live
/// replicas and the leases storage lists; holds no socket and no storage.
///
/// Every replica computes the same fair share from the same sorted list of
/// members: `count / n` each, one more for the first `count % n`. A replica
/// below its share takes partitions whose lease is free or has run out,
/// preferring those numbered `p % n == its index` so that replicas starting
/// together rarely ask for the same one; storage grants a claim only on a
/// lease that is free or run out, so two never hold one. A replica above
/// its share gives up the excess, a few a round, once no partition is free
/// (until then the others take free ones first). A replica that stops
/// renewing loses its partitions when their leases run out; it stops
/// treating them as its own earlier still, a lease's length after the start
/// of the last round that renewed them, before the database's lease ends.
public struct OwnershipCore: Sendable {
    public let me: Member
    public let partitions: Int
    public let leaseMs: UInt64
    /// At most this many partitions given up a round.
    public let releasesPerRound: Int

    /// The partitions this replica owns now.
    public private(set) var held: Set<Int> = []
    /// Until when, by this replica's clock, what it holds is its own.
    private var heldUntilMs: UInt64 = 0
    /// When the round being done began.
    private var roundStartMs: UInt64 = 0
    /// The owner of each partition held by a live member, and the members:
    /// where a device of a partition another replica holds is sent.
    private var owners: [Int: String] = [:]
    private var urls: [String: String] = [:]

    public init(me: Member, partitions: Int = Partition.count, leaseMs: UInt64, releasesPerRound: Int = 32) {
        self.me = me
        self.partitions = partitions
        self.leaseMs = leaseMs
        self.releasesPerRound = releasesPerRound
    }

    /// This replica's fair share among `members` (sorted by id, itself among them).
    public func share(among members: [Member]) -> Int {
        let ids = members.map(\.id).sorted()
        guard let index = ids.firstIndex(of: me.id) else { return 0 }
        return partitions / ids.count + (index < partitions % ids.count ? 1 : 0)
    }

    /// Plans a round at `nowMs` from the live members and the leases.
    public mutating func plan(members: [Member], leases: [Lease], nowMs: UInt64) -> LeaseRound {
        roundStartMs = nowMs
        urls = Dictionary(members.map { ($0.id, $0.url) }, uniquingKeysWith: { first, _ in first })
        owners = [:]
        for lease in leases where lease.live {
            if let owner = lease.owner, urls[owner] != nil { owners[lease.partition] = owner }
        }
        let ids = members.map(\.id).sorted()
        let target = share(among: members)
        let index = ids.firstIndex(of: me.id) ?? 0
        let taken = Set(leases.filter { $0.live && $0.owner != nil && $0.owner != me.id }.map(\.partition))
        let free = (0..<partitions).filter { !taken.contains($0) && !held.contains($0) }
        let preferred = { (partition: Int) in partition % max(ids.count, 1) == index }

        var round = LeaseRound(renew: held.sorted(), claim: [], release: [])
        if held.count < target {
            let ordered = free.filter(preferred) + free.filter { !preferred($0) }
            round.claim = Array(ordered.prefix(target - held.count))
        } else if held.count > target, free.isEmpty {
            // Those another replica prefers go first, highest numbers first.
            let surplus = held.filter { !preferred($0) }.sorted(by: >) + held.filter(preferred).sorted(by: >)
            round.release = Array(surplus.prefix(min(held.count - target, releasesPerRound)))
            round.renew = held.subtracting(round.release).sorted()
        }
        return round
    }

    /// Takes what storage answered to the round planned last: the leases it
    /// renewed and granted (any not renewed are another's now), the ones
    /// given up. Returns what changed.
    public mutating func settle(renewed: Set<Int>, claimed: Set<Int>, released: Set<Int>) -> OwnershipChange {
        let now = held.subtracting(released).intersection(renewed).union(claimed)
        let change = OwnershipChange(gained: now.subtracting(held), lost: held.subtracting(now))
        held = now
        heldUntilMs = roundStartMs + leaseMs
        for partition in held { owners[partition] = me.id }
        for partition in change.lost where owners[partition] == me.id { owners[partition] = nil }
        urls[me.id] = me.url
        return change
    }

    /// A round that failed (storage unreachable): what is held stays held
    /// until its leases would have run out by `nowMs`, then is lost.
    public mutating func failed(nowMs: UInt64) -> OwnershipChange {
        guard nowMs >= heldUntilMs, !held.isEmpty else { return OwnershipChange() }
        let lost = held
        held = []
        for partition in lost { owners[partition] = nil }
        return OwnershipChange(lost: lost)
    }

    /// Gives everything up, as a replica stopping does: the leases to release.
    public mutating func leave() -> (release: [Int], change: OwnershipChange) {
        let lost = held
        held = []
        for partition in lost { owners[partition] = nil }
        return (lost.sorted(), OwnershipChange(lost: lost))
    }

    /// Whether this replica owns `partition` at `nowMs`: it held it after the
    /// last round, and that round began less than a lease ago.
    public func holds(_ partition: Int, nowMs: UInt64) -> Bool {
        nowMs < heldUntilMs && held.contains(partition)
    }

    /// The owner of every partition, by number, as ``owner(of:)`` gives it.
    public var directory: [Member?] { (0..<partitions).map(owner(of:)) }

    /// The ids of the live members the last round saw, this replica's among them.
    public var members: Set<String> { Set(urls.keys) }

    /// Who owns `partition`, as the last round saw it: this replica, another
    /// live one (with its URL), or nobody (a lease run out and not yet taken).
    public func owner(of partition: Int) -> Member? {
        guard let id = owners[partition], let url = urls[id] else { return nil }
        return Member(id: id, url: url)
    }
}
