import Foundation
import PostgresNIO

/// ``ConnectionStorage`` in the connection server's tables of
/// PostgresSchema.swift, as Connection/SQLiteConnectionStorage.swift keeps it
/// in SQLite's. The limits per device and per project hold across processes:
/// each method that counts first locks the device's or project's row
/// (PostgresStorage's comment says why row locks).
extension PostgresStorage {
    // MARK: Server keys

    public func replaceServerKey(project: String, serverKeyHash: Data, createdAtMs: UInt64) async throws {
        try await write { connection in
            try await lockProject(project, on: connection)
            try await connection.query("""
                INSERT INTO serverKey (project, hash, createdAtMs) VALUES (\(project), \(serverKeyHash), \(Int64(clamping: createdAtMs)))
                ON CONFLICT (project) DO UPDATE SET hash = EXCLUDED.hash, createdAtMs = EXCLUDED.createdAtMs
                """, logger: logger)
        }
    }

    public func isServerKey(_ serverKeyHash: Data, of project: String) async throws -> Bool {
        try await read { connection in
            try await count("SELECT 1 FROM serverKey WHERE project = \(project) AND hash = \(serverKeyHash)", on: connection) > 0
        }
    }

    public func registration(_ device: String, project: String) async throws -> RegistrationState {
        try await read { connection in
            if try await count("SELECT 1 FROM device WHERE id = \(device) AND project = \(project)", on: connection) > 0 {
                return .registered
            }
            let deleted = try await count("SELECT 1 FROM deletedDevice WHERE id = \(device) AND project = \(project)", on: connection) > 0
            return deleted ? .unregistered : .unknown
        }
    }

    // MARK: Upstream

    private static let upstreamColumns =
        "position, project, device, app, messageId, data, receivedAtMs, expiresAtMs, verdict, verdictDescription"

    public func acceptUpstream(_ message: StoredUpstream, limit: Int) async throws -> UpstreamAcceptance {
        let data = try StoredColumns.json(message.data)
        return try await write { connection in
            // The device's messages take turns here: a repeat sent to two
            // replicas at once is kept once, and the count holds until commit.
            // A device that does not exist fails the insert's foreign key, as in SQLite.
            try await lock(device: message.device, on: connection)
            if let known = try await upstream("""
                SELECT \(unescaped: Self.upstreamColumns) FROM upstream
                WHERE device = \(message.device) AND app = \(message.app) AND messageId = \(message.messageId)
                """, on: connection).first {
                return .known(known)
            }
            let kept = try await value(Int.self, "SELECT COUNT(*) FROM upstream WHERE device = \(message.device)", on: connection) ?? 0
            guard kept < limit else { return .full(kept) }
            try await connection.query("""
                INSERT INTO upstream (project, device, app, messageId, data, receivedAtMs, expiresAtMs)
                VALUES (\(message.project), \(message.device), \(message.app), \(message.messageId), \(data),
                        \(Int64(clamping: message.receivedAtMs)), \(Int64(clamping: message.expiresAtMs)))
                """, logger: logger)
            return .kept
        }
    }

    public func pendingUpstream(project: String, after position: Int64, limit: Int) async throws -> [StoredUpstream] {
        try await read { connection in
            try await upstream("""
                SELECT \(unescaped: Self.upstreamColumns) FROM upstream
                WHERE project = \(project) AND verdict IS NULL AND position > \(position) ORDER BY position LIMIT \(limit)
                """, on: connection)
        }
    }

    public func claimUpstream(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, graceMs: UInt64,
                              limit: Int) async throws -> [StoredUpstream] {
        let now = Int64(clamping: nowMs)
        let grace = Int64(clamping: graceMs)
        return try await write { connection in
            // SKIP LOCKED: replicas claiming at once each take other rows, none waits.
            try await upstream("""
                UPDATE upstream SET claimedBy = \(replica), claimedUntilMs = \(Int64(clamping: untilMs)) WHERE position IN (
                    SELECT position FROM upstream
                    WHERE project = \(project) AND verdict IS NULL AND (claimedBy IS NULL OR claimedUntilMs <= \(now))
                      AND (expiresAtMs > \(now) OR (expiresAtMs <= receivedAtMs AND receivedAtMs + \(grace) > \(now)))
                    ORDER BY position LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING \(unescaped: Self.upstreamColumns)
                """, on: connection).sorted { $0.position < $1.position }
        }
    }

    public func settleUpstream(project: String, device: String, messageId: String, verdict: UpstreamVerdict,
                               atMs: UInt64) async throws -> StoredUpstream? {
        let (code, description) = StoredColumns.columns(of: verdict)
        return try await write { connection in
            // FOR UPDATE: of two replicas settling the same message, the
            // second waits, then finds it settled and settles nothing.
            guard var message = try await upstream("""
                SELECT \(unescaped: Self.upstreamColumns) FROM upstream
                WHERE device = \(device) AND messageId = \(messageId) AND project = \(project) AND verdict IS NULL
                ORDER BY position LIMIT 1 FOR UPDATE
                """, on: connection).first else { return nil }
            try await connection.query("""
                UPDATE upstream SET verdict = \(code), verdictDescription = \(description), settledAtMs = \(Int64(clamping: atMs))
                WHERE position = \(message.position)
                """, logger: logger)
            message.verdict = verdict
            return message
        }
    }

    public func settleExpiredUpstream(nowMs: UInt64, graceMs: UInt64, limit: Int,
                                      verdict: @Sendable (StoredUpstream) -> UpstreamVerdict) async throws -> [StoredUpstream] {
        let now = Int64(clamping: nowMs)
        let grace = Int64(clamping: graceMs)
        return try await write { connection in
            // SKIP LOCKED: a message a replica is claiming or settling now is left to it.
            let expired = try await upstream("""
                SELECT \(unescaped: Self.upstreamColumns) FROM upstream
                WHERE verdict IS NULL AND expiresAtMs <= \(now) AND (claimedBy IS NULL OR claimedUntilMs <= \(now))
                  AND NOT (expiresAtMs <= receivedAtMs AND receivedAtMs + \(grace) > \(now))
                ORDER BY expiresAtMs LIMIT \(limit) FOR UPDATE SKIP LOCKED
                """, on: connection)
            var settled: [StoredUpstream] = []
            for var message in expired {
                message.verdict = verdict(message)
                let (code, description) = StoredColumns.columns(of: message.verdict!)
                try await connection.query("""
                    UPDATE upstream SET verdict = \(code), verdictDescription = \(description), settledAtMs = \(now)
                    WHERE position = \(message.position)
                    """, logger: logger)
                settled.append(message)
            }
            return settled
        }
    }

    public func purgeSettledUpstream(expiredBeforeMs: UInt64) async throws {
        try await write { connection in
            try await execute("""
                DELETE FROM upstream WHERE verdict IS NOT NULL AND expiresAtMs < \(Int64(clamping: expiredBeforeMs))
                """, on: connection)
        }
    }

    /// The messages a query of ``upstreamColumns`` finds.
    private func upstream(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [StoredUpstream] {
        var messages: [StoredUpstream] = []
        for try await (position, project, device, app, messageId, data, receivedAt, expiresAt, verdict, verdictDescription)
            in try await connection.query(query, logger: logger)
            .decode((Int64, String, String, String, String, String, Int64, Int64, String?, String?).self) {
            messages.append(StoredUpstream(position: position, project: project, device: device, app: app, messageId: messageId,
                                           data: try StoredColumns.dictionary(data), receivedAtMs: milliseconds(receivedAt),
                                           expiresAtMs: milliseconds(expiresAt),
                                           verdict: StoredColumns.verdict(code: verdict, description: verdictDescription)))
        }
        return messages
    }

    // MARK: Downstream

    private static let downstreamColumns = "position, project, device, messageId, data, receivedAtMs, expiresAtMs, receiptRequested"

    public func addDownstream(_ message: StoredDownstream, limit: Int) async throws -> Bool {
        let data = try StoredColumns.json(message.data)
        return try await write { connection in
            // The device's messages take turns here, so that the count holds until commit.
            try await lock(device: message.device, on: connection)
            let waiting = try await value(Int.self, "SELECT COUNT(*) FROM downstream WHERE device = \(message.device)", on: connection) ?? 0
            guard waiting < limit else { return false }
            try await connection.query("""
                INSERT INTO downstream (project, device, messageId, data, receivedAtMs, expiresAtMs, receiptRequested)
                VALUES (\(message.project), \(message.device), \(message.messageId), \(data), \(Int64(clamping: message.receivedAtMs)),
                        \(Int64(clamping: message.expiresAtMs)), \(message.receiptRequested))
                """, logger: logger)
            return true
        }
    }

    public func pendingDownstream(device: String) async throws -> [StoredDownstream] {
        try await read { connection in
            try await downstream("""
                SELECT \(unescaped: Self.downstreamColumns) FROM downstream WHERE device = \(device) ORDER BY position
                """, on: connection)
        }
    }

    public func removeDownstream(device: String, messageId: String) async throws -> StoredDownstream? {
        try await write { connection in
            // The oldest of that id; of two replicas removing it at once, one gets it.
            try await downstream("""
                DELETE FROM downstream WHERE position = (
                    SELECT position FROM downstream WHERE device = \(device) AND messageId = \(messageId)
                    ORDER BY position LIMIT 1 FOR UPDATE)
                RETURNING \(unescaped: Self.downstreamColumns)
                """, on: connection).first
        }
    }

    public func removeExpiredDownstream(nowMs: UInt64) async throws -> [StoredDownstream] {
        try await write { connection in
            // One statement: each message is removed, and returned, by one process only.
            try await downstream("""
                DELETE FROM downstream WHERE expiresAtMs <= \(Int64(clamping: nowMs)) RETURNING \(unescaped: Self.downstreamColumns)
                """, on: connection)
        }
    }

    /// The messages a query of ``downstreamColumns`` finds, oldest first.
    private func downstream(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [StoredDownstream] {
        var messages: [(position: Int64, message: StoredDownstream)] = []
        for try await (position, project, device, messageId, data, receivedAt, expiresAt, receiptRequested)
            in try await connection.query(query, logger: logger)
            .decode((Int64, String, String, String, String, Int64, Int64, Bool).self) {
            messages.append((position, StoredDownstream(project: project, device: device, messageId: messageId,
                                                        data: try StoredColumns.dictionary(data), receivedAtMs: milliseconds(receivedAt),
                                                        expiresAtMs: milliseconds(expiresAt), receiptRequested: receiptRequested)))
        }
        // RETURNING has no ORDER BY.
        return messages.sorted { $0.position < $1.position }.map(\.message)
    }

    // MARK: Receipts

    public func addReceipt(_ receipt: StoredReceipt, limit: Int) async throws -> Int {
        try await write { connection in
            // The project's receipts take turns here, so that the newest `limit`
            // stay. A project that does not exist fails the insert's foreign key, as in SQLite.
            try await lock(project: receipt.project, on: connection)
            try await connection.query("""
                INSERT INTO receipt (project, messageId, payload) VALUES (\(receipt.project), \(receipt.messageId), \(receipt.payload))
                """, logger: logger)
            // The newest `limit` stay: those at or before the limit-th newest but one go.
            return try await count("""
                DELETE FROM receipt WHERE project = \(receipt.project) AND position <=
                    (SELECT position FROM receipt WHERE project = \(receipt.project) ORDER BY position DESC LIMIT 1 OFFSET \(limit))
                RETURNING 1
                """, on: connection)
        }
    }

    public func receipts(project: String, after position: Int64, limit: Int) async throws -> [StoredReceipt] {
        try await read { connection in
            var receipts: [StoredReceipt] = []
            for try await (position, project, messageId, payload) in try await connection.query("""
                SELECT position, project, messageId, payload FROM receipt
                WHERE project = \(project) AND position > \(position) ORDER BY position LIMIT \(limit)
                """, logger: logger).decode((Int64, String, String, String).self) {
                receipts.append(StoredReceipt(position: position, project: project, messageId: messageId, payload: payload))
            }
            return receipts
        }
    }

    public func claimReceipts(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, limit: Int) async throws -> [StoredReceipt] {
        let now = Int64(clamping: nowMs)
        return try await write { connection in
            var receipts: [StoredReceipt] = []
            for try await (position, project, messageId, payload) in try await connection.query("""
                UPDATE receipt SET claimedBy = \(replica), claimedUntilMs = \(Int64(clamping: untilMs)) WHERE position IN (
                    SELECT position FROM receipt WHERE project = \(project) AND (claimedBy IS NULL OR claimedUntilMs <= \(now))
                    ORDER BY position LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING position, project, messageId, payload
                """, logger: logger).decode((Int64, String, String, String).self) {
                receipts.append(StoredReceipt(position: position, project: project, messageId: messageId, payload: payload))
            }
            // RETURNING has no ORDER BY.
            return receipts.sorted { $0.position < $1.position }
        }
    }

    public func removeReceipt(project: String, messageId: String) async throws -> Bool {
        try await write { connection in
            try await count("DELETE FROM receipt WHERE project = \(project) AND messageId = \(messageId) RETURNING 1", on: connection) > 0
        }
    }

    // MARK: Claims

    public func renewClaims(replica: String, upstream: [Int64], receipts: [Int64], untilMs: UInt64) async throws {
        let until = Int64(clamping: untilMs)
        try await write { connection in
            try await execute("""
                UPDATE upstream SET claimedUntilMs = \(until) WHERE claimedBy = \(replica) AND position = ANY(\(upstream))
                """, on: connection)
            try await execute("""
                UPDATE upstream SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND NOT position = ANY(\(upstream))
                """, on: connection)
            try await execute("""
                UPDATE receipt SET claimedUntilMs = \(until) WHERE claimedBy = \(replica) AND position = ANY(\(receipts))
                """, on: connection)
            try await execute("""
                UPDATE receipt SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND NOT position = ANY(\(receipts))
                """, on: connection)
        }
    }

    public func releaseClaims(replica: String, upstream: [Int64], receipts: [Int64]) async throws {
        try await write { connection in
            try await execute("""
                UPDATE upstream SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND position = ANY(\(upstream))
                """, on: connection)
            try await execute("""
                UPDATE receipt SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND position = ANY(\(receipts))
                """, on: connection)
        }
    }

    public func releaseAllClaims() async throws {
        try await write { connection in
            try await execute("UPDATE upstream SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy IS NOT NULL", on: connection)
            try await execute("UPDATE receipt SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy IS NOT NULL", on: connection)
        }
    }
}
