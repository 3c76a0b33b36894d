import NearbyCore
import Partitions
import Testing

/// Leases as PostgreSQL keeps them (PostgresPartitionLeases), on the test's
/// clock: a claim is granted on a lease that is free, run out or the
/// claimant's; a renewal only on the renewer's own.
private struct LeaseTable {
    var leases: [Int: (owner: String, untilMs: UInt64)] = [:]
    var members: [String: (member: Member, untilMs: UInt64)] = [:]

    mutating func heartbeat(_ member: Member, nowMs: UInt64, leaseMs: UInt64) -> [Member] {
        members[member.id] = (member, nowMs + leaseMs)
        return members.values.filter { $0.untilMs > nowMs }.map(\.member).sorted { $0.id < $1.id }
    }

    func list(nowMs: UInt64) -> [Lease] {
        leases.map { Lease(partition: $0.key, owner: $0.value.owner, live: $0.value.untilMs > nowMs) }
    }

    mutating func apply(_ round: LeaseRound, by id: String, nowMs: UInt64, leaseMs: UInt64) -> (Set<Int>, Set<Int>, Set<Int>) {
        var renewed = Set<Int>(), claimed = Set<Int>()
        for partition in round.release where leases[partition]?.owner == id { leases[partition] = nil }
        for partition in round.renew where leases[partition]?.owner == id {
            leases[partition] = (id, nowMs + leaseMs)
            renewed.insert(partition)
        }
        for partition in round.claim {
            if let lease = leases[partition], lease.owner != id, lease.untilMs > nowMs { continue }
            leases[partition] = (id, nowMs + leaseMs)
            claimed.insert(partition)
        }
        return (renewed, claimed, Set(round.release))
    }

    mutating func leave(_ id: String, release: [Int]) {
        for partition in release where leases[partition]?.owner == id { leases[partition] = nil }
        members[id] = nil
    }
}

/// A replica's ownership, driven round by round against the shared table.
private struct Replica {
    var core: OwnershipCore
    var alive = true

    init(_ name: String, leaseMs: UInt64 = 10_000) {
        core = OwnershipCore(me: Member(id: name, url: "http://\(name).test"), leaseMs: leaseMs)
    }

    @discardableResult
    mutating func round(_ table: inout LeaseTable, nowMs: UInt64) -> OwnershipChange {
        let members = table.heartbeat(core.me, nowMs: nowMs, leaseMs: core.leaseMs)
        let plan = core.plan(members: members, leases: table.list(nowMs: nowMs), nowMs: nowMs)
        let (renewed, claimed, released) = table.apply(plan, by: core.me.id, nowMs: nowMs, leaseMs: core.leaseMs)
        return core.settle(renewed: renewed, claimed: claimed, released: released)
    }
}

@Suite(.timeLimit(.minutes(1))) struct OwnershipCoreTests {
    @Test func partitionsAreCRC32OfTheIdModuloTheirCount() {
        #expect(Partition.count == 256)
        // CRC-32's check value: 0xCBF43926, whose low byte is 0x26.
        #expect(Partition.of(device: "123456789") == 0x26)
        #expect(Partition.of(device: "") == 0)
        let spread = Dictionary(grouping: (0..<25_600).map { Partition.of(device: "device-\($0)") }, by: { $0 })
        #expect(spread.count == 256)
        #expect(spread.values.allSatisfy { (60...140).contains($0.count) })
    }

    @Test func aReplicaAloneTakesEveryPartitionInItsFirstRound() {
        var table = LeaseTable()
        var one = Replica("a")
        let change = one.round(&table, nowMs: 0)
        #expect(change.gained.count == 256 && change.lost.isEmpty)
        #expect(one.core.holds(17, nowMs: 9_999) && !one.core.holds(17, nowMs: 10_000))
        #expect(one.core.owner(of: 17) == Member(id: "a", url: "http://a.test"))
    }

    @Test func replicasStartingTogetherSplitThePartitionsEvenly() {
        var table = LeaseTable()
        var replicas = ["a", "b", "c"].map { Replica($0) }
        // All heartbeat before any claims, as replicas started at once do
        // within their first round's time.
        for replica in replicas { _ = table.heartbeat(replica.core.me, nowMs: 0, leaseMs: 10_000) }
        for now in stride(from: UInt64(0), through: 20_000, by: 3_000) {
            for index in replicas.indices { replicas[index].round(&table, nowMs: now) }
        }
        #expect(replicas.map(\.core.held.count) == [86, 85, 85])
        #expect(Set(replicas.flatMap(\.core.held)).count == 256)
    }

    @Test func aReplicaJoiningIsHandedItsShareAFewPartitionsARound() {
        var table = LeaseTable()
        var a = Replica("a")
        a.round(&table, nowMs: 0)
        var b = Replica("b")
        var rounds = 0
        var now: UInt64 = 3_000
        while b.core.held.count < 128, rounds < 20 {
            let given = a.round(&table, nowMs: now).lost.count
            #expect(given <= 32)
            b.round(&table, nowMs: now + 1)
            #expect(a.core.held.isDisjoint(with: b.core.held))
            now += 3_000
            rounds += 1
        }
        #expect(a.core.held.count == 128 && b.core.held.count == 128)
        #expect(rounds <= 5)
        // b prefers the odd partitions; a keeps the even ones it prefers.
        #expect(a.core.held.allSatisfy { $0 % 2 == 0 })
    }

    @Test func theDeadsPartitionsAreTakenOnceTheirLeasesRunOut() {
        var table = LeaseTable()
        var a = Replica("a"), b = Replica("b")
        for now in stride(from: UInt64(0), through: 30_000, by: 3_000) {
            a.round(&table, nowMs: now)
            b.round(&table, nowMs: now + 1)
        }
        #expect(b.core.held.count == 128)
        // b dies after its round at 30,001: its leases run until 40,001.
        var now: UInt64 = 33_000
        while a.core.held.count < 256 {
            a.round(&table, nowMs: now)
            // Nobody holds what b held while b's leases run.
            if now < 40_001 { #expect(a.core.held.count == 128) }
            now += 3_000
        }
        #expect(now - 3_000 <= 40_001 + 3_000)
    }

    @Test func aReplicaLeavingGivesItsPartitionsUpAtOnce() {
        var table = LeaseTable()
        var a = Replica("a"), b = Replica("b")
        for now in stride(from: UInt64(0), through: 30_000, by: 3_000) {
            a.round(&table, nowMs: now)
            b.round(&table, nowMs: now + 1)
        }
        let (release, change) = b.core.leave()
        #expect(release.count == 128 && change.lost.count == 128 && b.core.held.isEmpty)
        table.leave("b", release: release)
        let gained = a.round(&table, nowMs: 31_000).gained
        #expect(gained == change.lost)
    }

    @Test func whatIsHeldIsLostALeaseAfterTheLastRoundThatRenewedIt() {
        var table = LeaseTable()
        var a = Replica("a")
        a.round(&table, nowMs: 1_000)
        #expect(a.core.failed(nowMs: 4_000).isEmpty)
        #expect(a.core.failed(nowMs: 10_999).isEmpty && a.core.holds(3, nowMs: 10_999))
        #expect(a.core.failed(nowMs: 11_000).lost.count == 256)
        #expect(a.core.held.isEmpty && a.core.owner(of: 3) == nil)
        // Storage back: it claims them again.
        #expect(a.round(&table, nowMs: 12_000).gained.count == 256)
    }

    /// Replicas joining, dying and leaving at seeded random times, rounds at
    /// uneven intervals: at no instant do two replicas hold one partition,
    /// and once things are quiet every partition is held.
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64]) func neverTwoOwnersOfOnePartition(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var table = LeaseTable()
        var replicas: [Replica] = [Replica("r0")]
        var nextRound: [UInt64] = [0]
        var now: UInt64 = 0
        while now < 300_000 {
            now += UInt64.random(in: 100...700, using: &random)
            for index in replicas.indices where replicas[index].alive && nextRound[index] <= now {
                replicas[index].round(&table, nowMs: now)
                nextRound[index] = now + UInt64.random(in: 2_500...3_500, using: &random)
            }
            let roll = Int.random(in: 0..<200, using: &random)
            let living = replicas.indices.filter { replicas[$0].alive }
            if roll == 0, now < 240_000 {
                replicas.append(Replica("r\(replicas.count)"))
                nextRound.append(now)
            } else if roll == 1, living.count > 1, let index = living.randomElement(using: &random) {
                replicas[index].alive = false  // kill -9: it just stops
            } else if roll == 2, living.count > 1, let index = living.randomElement(using: &random) {
                let (release, _) = replicas[index].core.leave()
                table.leave(replicas[index].core.me.id, release: release)
                replicas[index].alive = false
            }
            for partition in 0..<256 {
                let holders = replicas.filter { $0.core.holds(partition, nowMs: now) }
                #expect(holders.count <= 1, "partition \(partition) held by \(holders.map(\.core.me.id)) at \(now)")
            }
        }
        // Quiet: a lease and a few rounds later, every partition is held, evenly.
        for _ in 0..<40 {
            now += 3_000
            for index in replicas.indices where replicas[index].alive { replicas[index].round(&table, nowMs: now) }
        }
        let living = replicas.filter(\.alive)
        #expect(Set(living.flatMap(\.core.held)).count == 256)
        #expect(living.map(\.core.held.count).max()! - living.map(\.core.held.count).min()! <= 1)
    }
}
