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
    /// ``upstreamColumns`` where another table's columns have the same names.
    private static let qualifiedUpstreamColumns = upstreamColumns.split(separator: ", ").map { "upstream.\($0)" }.joined(separator: ", ")

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
        try await write { connection in
            try await claimUpstream(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, graceMs: graceMs, limit: limit,
                                    on: connection)
        }
    }

    private func claimUpstream(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, graceMs: UInt64,
                               limit: Int, on connection: PostgresConnection) async throws -> [StoredUpstream] {
        let now = Int64(clamping: nowMs)
        let grace = Int64(clamping: graceMs)
        // SKIP LOCKED: replicas claiming at once each take other rows, none waits.
        return try await upstream("""
            UPDATE upstream SET claimedBy = \(replica), claimedUntilMs = \(Int64(clamping: untilMs)) WHERE position IN (
                SELECT position FROM upstream
                WHERE project = \(project) AND verdict IS NULL AND (claimedBy IS NULL OR claimedUntilMs <= \(now))
                  AND (expiresAtMs > \(now) OR (expiresAtMs <= receivedAtMs AND receivedAtMs + \(grace) > \(now)))
                ORDER BY position LIMIT \(limit) FOR UPDATE SKIP LOCKED)
            RETURNING \(unescaped: Self.upstreamColumns)
            """, on: connection).sorted { $0.position < $1.position }
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

    /// ``ConnectionWrite/addDownstream(_:limit:)``; throws ``StorageError/deviceNotFound(_:)`` when the device is gone.
    private func addDownstream(_ message: StoredDownstream, limit: Int, on connection: PostgresConnection) async throws -> Bool {
        // The device's messages take turns here, so that the count holds until commit.
        try await lockDevice(message.device, on: connection)
        let waiting = try await value(Int.self, "SELECT COUNT(*) FROM downstream WHERE device = \(message.device)", on: connection) ?? 0
        guard waiting < limit else { return false }
        try await connection.query("""
            INSERT INTO downstream (project, device, messageId, data, receivedAtMs, expiresAtMs, receiptRequested)
            VALUES (\(message.project), \(message.device), \(message.messageId), \(try StoredColumns.json(message.data)),
                    \(Int64(clamping: message.receivedAtMs)), \(Int64(clamping: message.expiresAtMs)), \(message.receiptRequested))
            """, logger: logger)
        return true
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
        try await write { connection in
            try await claimReceipts(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, limit: limit, on: connection)
        }
    }

    private func claimReceipts(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, limit: Int,
                               on connection: PostgresConnection) async throws -> [StoredReceipt] {
        let now = Int64(clamping: nowMs)
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

    // MARK: Claims

    private func renewClaims(replica: String, upstream: [Int64], receipts: [Int64], untilMs: UInt64, releasingOthers: Bool,
                             on connection: PostgresConnection) async throws {
        let until = Int64(clamping: untilMs)
        try await execute("""
            UPDATE upstream SET claimedUntilMs = \(until) WHERE claimedBy = \(replica) AND position = ANY(\(upstream))
            """, on: connection)
        try await execute("""
            UPDATE receipt SET claimedUntilMs = \(until) WHERE claimedBy = \(replica) AND position = ANY(\(receipts))
            """, on: connection)
        guard releasingOthers else { return }
        try await execute("""
            UPDATE upstream SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND NOT position = ANY(\(upstream))
            """, on: connection)
        try await execute("""
            UPDATE receipt SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND NOT position = ANY(\(receipts))
            """, on: connection)
    }

    private func releaseClaims(replica: String, upstream: [Int64], receipts: [Int64], on connection: PostgresConnection) async throws {
        if !upstream.isEmpty {
            try await execute("""
                UPDATE upstream SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy = \(replica) AND position = ANY(\(upstream))
                """, on: connection)
        }
        if !receipts.isEmpty {
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

    // MARK: Group commit

    /// One transaction of a batch's statements, not one per write: devices'
    /// messages are kept and settled a statement for all of them (a batch
    /// holds hundreds), the rarer writes one by one. The only failure a write
    /// may meet alone, its device deleted meanwhile, is looked for before
    /// anything is written, so that no statement fails and every other write
    /// commits; any other failure fails the batch.
    public func write(_ writes: [ConnectionWrite]) async throws -> [Result<ConnectionWriteResult, any Error>] {
        try await write { connection in
            var results = [Result<ConnectionWriteResult, any Error>?](repeating: nil, count: writes.count)
            var accepts: [(index: Int, message: StoredUpstream, limit: Int)] = []
            var settlements: [Settlement] = []
            for (index, write) in writes.enumerated() {
                switch write {
                case .acceptUpstream(let message, let limit): accepts.append((index, message, limit))
                case .settleUpstream(let project, let device, let messageId, let verdict, let atMs):
                    settlements.append(Settlement(index: index, project: project, device: device, messageId: messageId, verdict: verdict,
                                                  atMs: atMs))
                default: break
                }
            }
            for (index, acceptance) in try await acceptUpstream(accepts, on: connection) {
                results[index] = acceptance.map(ConnectionWriteResult.accepted)
            }
            for (index, settled) in try await settleUpstream(settlements, on: connection) {
                results[index] = .success(.settled(settled))
            }
            for index in writes.applyingOrder where results[index] == nil {
                results[index] = try await applyAlone(writes[index], on: connection)
            }
            return results.map { $0! }
        }
    }

    /// A write of the stages after the settlements, on its own statements.
    private func applyAlone(_ write: ConnectionWrite, on connection: PostgresConnection) async throws
        -> Result<ConnectionWriteResult, any Error> {
        switch write {
        case .acceptUpstream, .settleUpstream:
            // Kept and settled a batch at a time, before.
            throw GroupCommitMismatch()
        case .removeReceipt(let project, let messageId):
            let removed = try await count("DELETE FROM receipt WHERE project = \(project) AND messageId = \(messageId) RETURNING 1",
                                          on: connection) > 0
            return .success(.removed(removed))
        case .addDownstream(let message, let limit):
            do {
                return .success(.added(try await addDownstream(message, limit: limit, on: connection)))
            } catch let error as StorageError {
                // Found before any statement failed: the transaction goes on.
                return .failure(error)
            }
        case .releaseClaims(let replica, let upstream, let receipts):
            try await releaseClaims(replica: replica, upstream: upstream, receipts: receipts, on: connection)
            return .success(.released)
        case .renewClaims(let replica, let upstream, let receipts, let untilMs, let releasingOthers):
            try await renewClaims(replica: replica, upstream: upstream, receipts: receipts, untilMs: untilMs,
                                  releasingOthers: releasingOthers, on: connection)
            return .success(.released)
        case .claim(let project, let replica, let nowMs, let untilMs, let graceMs, let limit):
            let receipts = try await claimReceipts(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, limit: limit,
                                                   on: connection)
            let upstream = receipts.count < limit
                ? try await claimUpstream(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, graceMs: graceMs,
                                          limit: limit - receipts.count, on: connection)
                : []
            return .success(.claimed(receipts: receipts, upstream: upstream))
        }
    }

    /// Keeps devices' upstream messages, in order, in four statements
    /// however many: the devices' rows locked (in order of id, so that two
    /// replicas' batches cannot deadlock; a repeat sent to two replicas at
    /// once is then kept once, and each device's count holds until commit),
    /// repeats looked up, counts taken, and the new ones inserted.
    private func acceptUpstream(_ accepts: [(index: Int, message: StoredUpstream, limit: Int)],
                                on connection: PostgresConnection) async throws -> [(Int, Result<UpstreamAcceptance, any Error>)] {
        guard !accepts.isEmpty else { return [] }
        let devices = Array(Set(accepts.map(\.message.device))).sorted()
        var existing: Set<String> = []
        for try await device in try await connection.query("""
            SELECT id FROM device WHERE id = ANY(\(devices)) ORDER BY id FOR NO KEY UPDATE
            """, logger: logger).decode(String.self) {
            existing.insert(device)
        }
        struct Key: Hashable { let device, app, messageId: String }
        var known: [Key: StoredUpstream] = [:]
        for message in try await upstream("""
            SELECT \(unescaped: Self.upstreamColumns) FROM upstream WHERE (device, app, messageId) IN (
                SELECT * FROM unnest(\(accepts.map(\.message.device))::text[], \(accepts.map(\.message.app))::text[],
                                     \(accepts.map(\.message.messageId))::text[]))
            """, on: connection) {
            known[Key(device: message.device, app: message.app, messageId: message.messageId)] = message
        }
        var kept: [String: Int] = [:]
        for try await (device, count) in try await connection.query("""
            SELECT device, COUNT(*) FROM upstream WHERE device = ANY(\(devices)) GROUP BY device
            """, logger: logger).decode((String, Int64).self) {
            kept[device] = Int(count)
        }
        var results: [(Int, Result<UpstreamAcceptance, any Error>)] = []
        // The new messages; a repeat of one of them within the batch is answered with it once inserted.
        var inserts: [StoredUpstream] = []
        var repeats: [(index: Int, of: Key)] = []
        var inserting: Set<Key> = []
        for (index, message, limit) in accepts {
            let key = Key(device: message.device, app: message.app, messageId: message.messageId)
            guard existing.contains(message.device) else {
                results.append((index, .failure(StorageError.deviceNotFound(message.device))))
                continue
            }
            if let message = known[key] {
                results.append((index, .success(.known(message))))
            } else if inserting.contains(key) {
                repeats.append((index, key))
            } else if kept[message.device, default: 0] >= limit {
                results.append((index, .success(.full(kept[message.device, default: 0]))))
            } else {
                kept[message.device, default: 0] += 1
                inserting.insert(key)
                inserts.append(message)
                results.append((index, .success(.kept)))
            }
        }
        guard !inserts.isEmpty else { return results }
        let data = try inserts.map { try StoredColumns.json($0.data) }
        // WITH ORDINALITY … ORDER BY: positions in the order the messages came.
        let inserted = try await connection.query("""
            INSERT INTO upstream (project, device, app, messageId, data, receivedAtMs, expiresAtMs)
            SELECT project, device, app, messageId, data, receivedAtMs, expiresAtMs
            FROM unnest(\(inserts.map(\.project))::text[], \(inserts.map(\.device))::text[], \(inserts.map(\.app))::text[],
                        \(inserts.map(\.messageId))::text[], \(data)::text[],
                        \(inserts.map { Int64(clamping: $0.receivedAtMs) })::bigint[],
                        \(inserts.map { Int64(clamping: $0.expiresAtMs) })::bigint[])
                WITH ORDINALITY AS new (project, device, app, messageId, data, receivedAtMs, expiresAtMs, ordinal)
            ORDER BY ordinal
            RETURNING position, device, app, messageId
            """, logger: logger).decode((Int64, String, String, String).self)
        var positions: [Key: Int64] = [:]
        for try await (position, device, app, messageId) in inserted {
            positions[Key(device: device, app: app, messageId: messageId)] = position
        }
        for message in inserts {
            let key = Key(device: message.device, app: message.app, messageId: message.messageId)
            guard known[key] == nil, let position = positions[key] else { continue }
            var stored = message
            stored.position = position
            known[key] = stored
        }
        for (index, key) in repeats {
            guard let message = known[key] else { throw GroupCommitMismatch() }
            results.append((index, .success(.known(message))))
        }
        return results
    }

    /// A settlement of a batch.
    private struct Settlement {
        let index: Int
        let project, device, messageId: String
        let verdict: UpstreamVerdict
        let atMs: UInt64
    }

    /// Settles pending messages in two statements however many: each
    /// settlement's message found (the k-th settlement of one id in a batch
    /// takes the k-th oldest pending message of that id, as one after the
    /// other would), then all settled. Of two replicas settling one message
    /// at once, the second waits for the first's row lock, finds it settled
    /// (READ COMMITTED checks the row again) and settles nothing.
    private func settleUpstream(_ settlements: [Settlement], on connection: PostgresConnection) async throws -> [(Int, StoredUpstream?)] {
        guard !settlements.isEmpty else { return [] }
        struct Key: Hashable { let project, device, messageId: String }
        var candidates: [Key: [Int64]] = [:]
        for try await (position, project, device, messageId) in try await connection.query("""
            SELECT position, project, device, messageId FROM upstream
            WHERE verdict IS NULL AND (project, device, messageId) IN (
                SELECT * FROM unnest(\(settlements.map(\.project))::text[], \(settlements.map(\.device))::text[],
                                     \(settlements.map(\.messageId))::text[]))
            ORDER BY position
            """, logger: logger).decode((Int64, String, String, String).self) {
            candidates[Key(project: project, device: device, messageId: messageId), default: []].append(position)
        }
        var taken: [Key: Int] = [:]
        var chosen: [(settlement: Settlement, position: Int64?)] = []
        for settlement in settlements {
            let key = Key(project: settlement.project, device: settlement.device, messageId: settlement.messageId)
            let occurrence = taken[key, default: 0]
            taken[key] = occurrence + 1
            let positions = candidates[key] ?? []
            chosen.append((settlement, occurrence < positions.count ? positions[occurrence] : nil))
        }
        let updates = chosen.compactMap { choice in choice.position.map { ($0, choice.settlement) } }
        var settled: [Int64: StoredUpstream] = [:]
        if !updates.isEmpty {
            let columns = updates.map { StoredColumns.columns(of: $0.1.verdict) }
            for message in try await upstream("""
                UPDATE upstream SET verdict = new.code,
                    verdictDescription = CASE WHEN new.described THEN new.description END, settledAtMs = new.atMs
                FROM unnest(\(updates.map(\.0))::bigint[], \(columns.map(\.code))::text[], \(columns.map { $0.description ?? "" })::text[],
                            \(columns.map { $0.description != nil })::boolean[], \(updates.map { Int64(clamping: $0.1.atMs) })::bigint[])
                    AS new (position, code, description, described, atMs)
                WHERE upstream.position = new.position AND upstream.verdict IS NULL
                RETURNING \(unescaped: Self.qualifiedUpstreamColumns)
                """, on: connection) {
                settled[message.position] = message
            }
        }
        return chosen.map { ($0.settlement.index, $0.position.flatMap { settled[$0] }) }
    }
}
