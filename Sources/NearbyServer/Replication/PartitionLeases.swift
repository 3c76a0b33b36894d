import Partitions

/// Where the replicas sharing a database record who is alive and which
/// partition each owns (doc/architecture.md, "Several nearby-server
/// replicas"). Times are the database's clock, so the replicas' clocks need
/// not agree; lengths are in milliseconds. PostgreSQL keeps them
/// (PostgresPartitionLeases.swift); a server alone on SQLite owns every
/// partition and keeps no leases.
protocol PartitionLeases: Sendable {
    /// Records `member` alive for `leaseMs`, and lists the live members, by id,
    /// and every partition's lease.
    func survey(member: Member, leaseMs: UInt64) async throws -> (members: [Member], leases: [Lease])

    /// Does `round` for `replica` in one transaction: gives up its
    /// `release`s, renews those of its `renew`s it still owns, and takes
    /// those of its `claim`s that are free, run out or its own, each for
    /// `leaseMs`. Returns the partitions renewed and claimed.
    func apply(_ round: LeaseRound, replica: String, leaseMs: UInt64) async throws -> (renewed: Set<Int>, claimed: Set<Int>)

    /// Gives up every lease of `replica` and its membership: a replica stopping.
    func leave(replica: String) async throws
}
