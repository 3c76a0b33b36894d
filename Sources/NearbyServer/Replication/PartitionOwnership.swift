import Logging
import NearbyCore
import Partitions
import ServiceLifecycle

/// This replica's share of the devices' partitions, kept by rounds against
/// the leases in the database (``PartitionLeases``): every third of
/// `[replication] lease-seconds` it says it is alive, renews what it holds,
/// takes what it is owed and gives up what it holds beyond its share
/// (``OwnershipCore`` decides). Stopping, it gives everything up at once so
/// the others take it at their next round instead of a lease later.
actor PartitionOwnership {
    private let leases: any PartitionLeases
    private let clock: any WallClock
    private let logger: Logger
    private let replica: String
    private let leaseMs: UInt64
    /// Nil until the replica listens and knows its URL.
    private var core: OwnershipCore?
    /// Who serves each partition, for the requests that arrive.
    nonisolated let directory: PartitionDirectory
    /// Told after each round (``Rounded``).
    private let rounded: @Sendable (Rounded) async -> Void
    /// Told once this replica has given its partitions up, stopping.
    private let left: @Sendable () async -> Void

    /// What a round saw and changed.
    struct Rounded: Sendable {
        /// The replica serving each partition, by number; nil where none does.
        var owners: [String?]
        /// The replicas alive; nil when the round could not survey them.
        var live: Set<String>?
        var change: OwnershipChange
    }

    init(replica: String, leases: any PartitionLeases, leaseMs: UInt64, clock: any WallClock, logger: Logger,
         rounded: @escaping @Sendable (Rounded) async -> Void = { _ in }, left: @escaping @Sendable () async -> Void = {}) {
        self.replica = replica
        directory = PartitionDirectory(replica: replica)
        self.leases = leases
        self.leaseMs = leaseMs
        self.clock = clock
        self.logger = logger
        self.rounded = rounded
        self.left = left
    }

    /// The partitions this replica owns now.
    var held: Set<Int> {
        guard let core else { return [] }
        let now = clock.nowMs
        return core.held.filter { core.holds($0, nowMs: now) }
    }

    /// Who owns the device's partition, as the last round saw it.
    func owner(ofDevice device: String) -> Member? {
        core?.owner(of: Partition.of(device: device))
    }

    /// Rounds, as `url`, until the task is cancelled or graceful shutdown;
    /// then gives every partition up.
    func run(url: String) async {
        core = OwnershipCore(me: Member(id: replica, url: url), leaseMs: leaseMs)
        logger.info("taking a share of the partitions", metadata: ["replica": "\(replica)", "url": "\(url)"])
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                await self.round()
                try? await Task.sleep(for: .milliseconds(Int64(self.leaseMs / 3)))
            }
        }
        await leave()
    }

    /// One round: survey, plan, apply, settle.
    func round() async {
        guard var core else { return }
        let start = clock.nowMs
        let change: OwnershipChange
        var live: Set<String>?
        do {
            let (members, leases) = try await self.leases.survey(member: core.me, leaseMs: leaseMs)
            let plan = core.plan(members: members, leases: leases, nowMs: start)
            let (renewed, claimed) = try await self.leases.apply(plan, replica: replica, leaseMs: leaseMs)
            change = core.settle(renewed: renewed, claimed: claimed, released: Set(plan.release))
            live = core.members
        } catch {
            change = core.failed(nowMs: clock.nowMs)
            logger.warning("could not renew the partitions' leases: \(PostgresStorage.reason(error))",
                           metadata: ["replica": "\(replica)", "held": "\(core.held.count)"])
        }
        self.core = core
        let directory = core.directory
        self.directory.update(directory)
        report(change, held: core.held.count)
        await rounded(Rounded(owners: directory.map { $0?.id }, live: live, change: change))
    }

    private func leave() async {
        guard var core else { return }
        let (_, change) = core.leave()
        self.core = core
        directory.update(core.directory)
        do {
            try await leases.leave(replica: replica)
        } catch {
            logger.warning("could not give the partitions up: \(PostgresStorage.reason(error)); they go when their leases run out",
                           metadata: ["replica": "\(replica)"])
        }
        report(change, held: 0)
        await left()
    }

    private func report(_ change: OwnershipChange, held: Int) {
        guard !change.isEmpty else { return }
        logger.info("partitions: holds \(held) of \(Partition.count)",
                    metadata: ["replica": "\(replica)", "gained": "\(change.gained.count)", "lost": "\(change.lost.count)"])
    }
}
