import Partitions
import PostgresNIO

/// ``PartitionLeases`` in PostgreSQL's `replicaMember` and `partitionLease`
/// (PostgresSchema.swift, version 5), on the database's clock
/// (`nearby_now_ms()`). Two replicas claiming one run-out lease at once
/// cannot both have it: the claim is an upsert whose condition PostgreSQL
/// checks again on the row as the first claimant left it.
extension PostgresStorage: PartitionLeases {
    /// Members gone this long are forgotten; until then they are only not live.
    private static let forgetMemberMs: Int64 = 86_400_000

    func survey(member: Member, leaseMs: UInt64) async throws -> (members: [Member], leases: [Lease]) {
        let lease = Int64(clamping: leaseMs)
        return try await write { connection in
            try await execute("""
                INSERT INTO replicaMember (id, url, untilMs) VALUES (\(member.id), \(member.url), nearby_now_ms() + \(lease))
                ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, untilMs = EXCLUDED.untilMs
                """, on: connection)
            try await execute("DELETE FROM replicaMember WHERE untilMs < nearby_now_ms() - \(Self.forgetMemberMs)", on: connection)
            var members: [Member] = []
            for try await (id, url) in try await connection.query(
                "SELECT id, url FROM replicaMember WHERE untilMs > nearby_now_ms() ORDER BY id", logger: logger
            ).decode((String, String).self) {
                members.append(Member(id: id, url: url))
            }
            var leases: [Lease] = []
            for try await (partition, owner, live) in try await connection.query(
                "SELECT partition, owner, untilMs > nearby_now_ms() FROM partitionLease", logger: logger
            ).decode((Int32, String, Bool).self) {
                leases.append(Lease(partition: Int(partition), owner: owner, live: live))
            }
            return (members, leases)
        }
    }

    func apply(_ round: LeaseRound, replica: String, leaseMs: UInt64) async throws -> (renewed: Set<Int>, claimed: Set<Int>) {
        let lease = Int64(clamping: leaseMs)
        let release = round.release.map(Int32.init), renew = round.renew.map(Int32.init), claim = round.claim.map(Int32.init)
        return try await write { connection in
            if !release.isEmpty {
                try await execute("DELETE FROM partitionLease WHERE owner = \(replica) AND partition = ANY(\(release))", on: connection)
            }
            var renewed = Set<Int>()
            if !renew.isEmpty {
                for try await partition in try await connection.query("""
                    UPDATE partitionLease SET untilMs = nearby_now_ms() + \(lease)
                    WHERE owner = \(replica) AND partition = ANY(\(renew)) RETURNING partition
                    """, logger: logger).decode(Int32.self) {
                    renewed.insert(Int(partition))
                }
            }
            var claimed = Set<Int>()
            if !claim.isEmpty {
                for try await partition in try await connection.query("""
                    INSERT INTO partitionLease (partition, owner, untilMs)
                    SELECT wanted, \(replica), nearby_now_ms() + \(lease) FROM unnest(\(claim)::INTEGER[]) AS wanted
                    ON CONFLICT (partition) DO UPDATE SET owner = EXCLUDED.owner, untilMs = EXCLUDED.untilMs
                    WHERE partitionLease.untilMs <= nearby_now_ms() OR partitionLease.owner = EXCLUDED.owner
                    RETURNING partition
                    """, logger: logger).decode(Int32.self) {
                    claimed.insert(Int(partition))
                }
            }
            return (renewed, claimed)
        }
    }

    func leave(replica: String) async throws {
        try await write { connection in
            try await execute("DELETE FROM partitionLease WHERE owner = \(replica)", on: connection)
            try await execute("DELETE FROM replicaMember WHERE id = \(replica)", on: connection)
        }
    }
}

/// A live replica and how many partitions it owns, as `nearby-server
/// replicas` prints them.
public struct ReplicaStatus: Sendable, Equatable, Codable {
    public var id: String
    public var url: String
    public var partitions: Int
}

extension PostgresStorage {
    /// The live replicas, by id, with the partitions each owns by a lease
    /// still running, and how many partitions nobody owns now.
    public func replicaStatus() async throws -> (replicas: [ReplicaStatus], unowned: Int) {
        try await read { connection in
            var replicas: [ReplicaStatus] = []
            for try await (id, url, partitions) in try await connection.query("""
                SELECT id, url, (SELECT count(*) FROM partitionLease WHERE owner = id AND untilMs > nearby_now_ms())
                FROM replicaMember WHERE untilMs > nearby_now_ms() ORDER BY id
                """, logger: logger).decode((String, String, Int64).self) {
                replicas.append(ReplicaStatus(id: id, url: url, partitions: Int(partitions)))
            }
            let owned = try await value(Int64.self, "SELECT count(*) FROM partitionLease WHERE untilMs > nearby_now_ms()",
                                        on: connection) ?? 0
            return (replicas, Partition.count - Int(owned))
        }
    }
}
