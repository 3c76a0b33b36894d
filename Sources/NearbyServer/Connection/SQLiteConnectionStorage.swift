import Foundation
import GRDB

/// ``ConnectionStorage`` in the tables of migration v5 (SQLiteStorage.swift).
extension SQLiteStorage {
    // MARK: Server keys

    public func replaceServerKey(project: String, serverKeyHash: Data, createdAtMs: UInt64) async throws {
        try await pool.write { db in
            try Self.requireProject(project, db)
            try db.execute(sql: "INSERT OR REPLACE INTO serverKey (project, hash, createdAtMs) VALUES (?, ?, ?)",
                           arguments: [project, serverKeyHash, Int64(clamping: createdAtMs)])
        }
    }

    public func isServerKey(_ serverKeyHash: Data, of project: String) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM serverKey WHERE project = ? AND hash = ?)",
                              arguments: [project, serverKeyHash]) ?? false
        }
    }

    public func registration(_ device: String, project: String) async throws -> RegistrationState {
        try await pool.read { db in
            if try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM device WHERE id = ? AND project = ?)",
                                 arguments: [device, project]) ?? false {
                return .registered
            }
            let deleted = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM deletedDevice WHERE id = ? AND project = ?)",
                                            arguments: [device, project]) ?? false
            return deleted ? .unregistered : .unknown
        }
    }

    // MARK: Upstream

    private static let upstreamColumns =
        "position, project, device, app, messageId, data, receivedAtMs, expiresAtMs, verdict, verdictDescription"

    private static func acceptUpstream(_ message: StoredUpstream, limit: Int, _ db: Database) throws -> UpstreamAcceptance {
        // Cached statements: a batch runs these hundreds of times, compiled once.
        if let known = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT \(Self.upstreamColumns) FROM upstream WHERE device = ? AND app = ? AND messageId = ?
            """),
                                        arguments: [message.device, message.app, message.messageId]) {
            return .known(try Self.upstream(known))
        }
        // The unique (device, app, messageId) index counts them.
        let kept = try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM upstream WHERE device = ?"),
                                    arguments: [message.device]) ?? 0
        guard kept < limit else { return .full(kept) }
        try db.cachedStatement(sql: """
            INSERT INTO upstream (project, device, app, messageId, data, receivedAtMs, expiresAtMs) VALUES (?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [message.project, message.device, message.app, message.messageId, try StoredColumns.json(message.data),
                             Int64(clamping: message.receivedAtMs), Int64(clamping: message.expiresAtMs)])
        return .kept
    }

    public func pendingUpstream(project: String, after position: Int64, limit: Int) async throws -> [StoredUpstream] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(Self.upstreamColumns) FROM upstream WHERE project = ? AND verdict IS NULL AND position > ?
                ORDER BY position LIMIT ?
                """, arguments: [project, position, limit]).map(Self.upstream)
        }
    }

    /// Which messages without a verdict no replica holds at `?` (nowMs), and
    /// are in time at `?` (nowMs) with `?` (graceMs) for TTL 0.
    private static let claimable = "(claimedBy IS NULL OR claimedUntilMs <= ?)"
    private static let inTime = "(expiresAtMs > ? OR (expiresAtMs <= receivedAtMs AND receivedAtMs + ? > ?))"

    public func claimUpstream(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, graceMs: UInt64,
                              limit: Int) async throws -> [StoredUpstream] {
        // One writer at a time: what one replica claims, no other sees unclaimed.
        try await pool.write { db in
            try Self.claimUpstream(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, graceMs: graceMs, limit: limit, db)
        }
    }

    private static func claimUpstream(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, graceMs: UInt64,
                                      limit: Int, _ db: Database) throws -> [StoredUpstream] {
        let now = Int64(clamping: nowMs)
        let messages = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT \(Self.upstreamColumns) FROM upstream WHERE project = ? AND verdict IS NULL AND \(Self.claimable) AND \(Self.inTime)
            ORDER BY position LIMIT ?
            """), arguments: [project, now, now, Int64(clamping: graceMs), now, limit]).map(Self.upstream)
        try Self.claim("upstream", messages.map(\.position), for: replica, untilMs: untilMs, db)
        return messages
    }

    /// Positions as a JSON array, for `json_each`: one parameter however many.
    private static func jsonArray(_ positions: [Int64]) -> String {
        "[" + positions.map(String.init).joined(separator: ",") + "]"
    }

    /// Marks the rows of `table` at `positions` claimed by `replica` until `untilMs`.
    private static func claim(_ table: String, _ positions: [Int64], for replica: String, untilMs: UInt64, _ db: Database) throws {
        guard !positions.isEmpty else { return }
        try db.cachedStatement(sql: """
            UPDATE \(table) SET claimedBy = ?, claimedUntilMs = ? WHERE position IN (SELECT value FROM json_each(?))
            """).execute(arguments: [replica, Int64(clamping: untilMs), Self.jsonArray(positions)])
    }

    private static func settleUpstream(project: String, device: String, messageId: String, verdict: UpstreamVerdict,
                                       atMs: UInt64, _ db: Database) throws -> StoredUpstream? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT \(Self.upstreamColumns) FROM upstream WHERE device = ? AND messageId = ? AND project = ? AND verdict IS NULL
            ORDER BY position LIMIT 1
            """), arguments: [device, messageId, project]) else { return nil }
        var message = try Self.upstream(row)
        let (code, description) = StoredColumns.columns(of: verdict)
        try db.cachedStatement(sql: "UPDATE upstream SET verdict = ?, verdictDescription = ?, settledAtMs = ? WHERE position = ?")
            .execute(arguments: [code, description, Int64(clamping: atMs), message.position])
        message.verdict = verdict
        return message
    }

    public func settleExpiredUpstream(nowMs: UInt64, graceMs: UInt64, limit: Int,
                                      verdict: @Sendable (StoredUpstream) -> UpstreamVerdict) async throws -> [StoredUpstream] {
        let now = Int64(clamping: nowMs)
        return try await pool.write { db in
            let expired = try Row.fetchAll(db, sql: """
                SELECT \(Self.upstreamColumns) FROM upstream
                WHERE verdict IS NULL AND expiresAtMs <= ? AND \(Self.claimable) AND NOT \(Self.inTime) ORDER BY expiresAtMs LIMIT ?
                """, arguments: [now, now, now, Int64(clamping: graceMs), now, limit]).map(Self.upstream)
            return try expired.map { message in
                var message = message
                message.verdict = verdict(message)
                let (code, description) = StoredColumns.columns(of: message.verdict!)
                try db.execute(sql: "UPDATE upstream SET verdict = ?, verdictDescription = ?, settledAtMs = ? WHERE position = ?",
                               arguments: [code, description, now, message.position])
                return message
            }
        }
    }

    public func purgeSettledUpstream(expiredBeforeMs: UInt64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM upstream WHERE verdict IS NOT NULL AND expiresAtMs < ?",
                           arguments: [Int64(clamping: expiredBeforeMs)])
        }
    }

    private static func upstream(_ row: Row) throws -> StoredUpstream {
        StoredUpstream(position: row["position"], project: row["project"], device: row["device"], app: row["app"],
                       messageId: row["messageId"], data: try StoredColumns.dictionary(row["data"]),
                       receivedAtMs: UInt64(clamping: row["receivedAtMs"] as Int64),
                       expiresAtMs: UInt64(clamping: row["expiresAtMs"] as Int64),
                       verdict: StoredColumns.verdict(code: row["verdict"], description: row["verdictDescription"]))
    }

    // MARK: Downstream

    private static let downstreamColumns = "project, device, messageId, data, receivedAtMs, expiresAtMs, receiptRequested"

    private static func addDownstream(_ message: StoredDownstream, limit: Int, _ db: Database) throws -> Bool {
        let waiting = try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM downstream WHERE device = ?"),
                                       arguments: [message.device]) ?? 0
        guard waiting < limit else { return false }
        try db.cachedStatement(sql: """
            INSERT INTO downstream (project, device, messageId, data, receivedAtMs, expiresAtMs, receiptRequested)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: [message.project, message.device, message.messageId, try StoredColumns.json(message.data),
                             Int64(clamping: message.receivedAtMs), Int64(clamping: message.expiresAtMs), message.receiptRequested])
        return true
    }

    public func pendingDownstream(device: String) async throws -> [StoredDownstream] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT \(Self.downstreamColumns) FROM downstream WHERE device = ? ORDER BY position",
                             arguments: [device]).map(Self.downstream)
        }
    }

    public func removeDownstream(device: String, messageId: String) async throws -> StoredDownstream? {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: """
                SELECT position, \(Self.downstreamColumns) FROM downstream WHERE device = ? AND messageId = ? ORDER BY position LIMIT 1
                """, arguments: [device, messageId]) else { return nil }
            try db.execute(sql: "DELETE FROM downstream WHERE position = ?", arguments: [row["position"] as Int64])
            return try Self.downstream(row)
        }
    }

    public func removeExpiredDownstream(nowMs: UInt64) async throws -> [StoredDownstream] {
        try await pool.write { db in
            let rows = try Row.fetchAll(db, sql: "SELECT \(Self.downstreamColumns) FROM downstream WHERE expiresAtMs <= ? ORDER BY position",
                                        arguments: [Int64(clamping: nowMs)])
            try db.execute(sql: "DELETE FROM downstream WHERE expiresAtMs <= ?", arguments: [Int64(clamping: nowMs)])
            return try rows.map(Self.downstream)
        }
    }

    private static func downstream(_ row: Row) throws -> StoredDownstream {
        StoredDownstream(project: row["project"], device: row["device"], messageId: row["messageId"],
                         data: try StoredColumns.dictionary(row["data"]),
                         receivedAtMs: UInt64(clamping: row["receivedAtMs"] as Int64),
                         expiresAtMs: UInt64(clamping: row["expiresAtMs"] as Int64), receiptRequested: row["receiptRequested"])
    }

    // MARK: Receipts

    public func addReceipt(_ receipt: StoredReceipt, limit: Int) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "INSERT INTO receipt (project, messageId, payload) VALUES (?, ?, ?)",
                           arguments: [receipt.project, receipt.messageId, receipt.payload])
            // The newest `limit` stay: those at or before the limit-th newest but one go.
            try db.execute(sql: """
                DELETE FROM receipt WHERE project = ? AND position <=
                    (SELECT position FROM receipt WHERE project = ? ORDER BY position DESC LIMIT 1 OFFSET ?)
                """, arguments: [receipt.project, receipt.project, limit])
            return db.changesCount
        }
    }

    public func receipts(project: String, after position: Int64, limit: Int) async throws -> [StoredReceipt] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT position, project, messageId, payload FROM receipt WHERE project = ? AND position > ? ORDER BY position LIMIT ?
                """, arguments: [project, position, limit]).map {
                StoredReceipt(position: $0["position"], project: $0["project"], messageId: $0["messageId"], payload: $0["payload"])
            }
        }
    }

    public func claimReceipts(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, limit: Int) async throws -> [StoredReceipt] {
        try await pool.write { db in
            try Self.claimReceipts(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, limit: limit, db)
        }
    }

    private static func claimReceipts(project: String, replica: String, nowMs: UInt64, untilMs: UInt64, limit: Int,
                                      _ db: Database) throws -> [StoredReceipt] {
        let receipts = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT position, project, messageId, payload FROM receipt WHERE project = ? AND \(Self.claimable) ORDER BY position LIMIT ?
            """), arguments: [project, Int64(clamping: nowMs), limit]).map {
            StoredReceipt(position: $0["position"], project: $0["project"], messageId: $0["messageId"], payload: $0["payload"])
        }
        try Self.claim("receipt", receipts.map(\.position), for: replica, untilMs: untilMs, db)
        return receipts
    }

    private static func removeReceipt(project: String, messageId: String, _ db: Database) throws -> Bool {
        try db.cachedStatement(sql: "DELETE FROM receipt WHERE project = ? AND messageId = ?").execute(arguments: [project, messageId])
        return db.changesCount > 0
    }

    // MARK: Claims

    private static func renewClaims(replica: String, upstream: [Int64], receipts: [Int64], untilMs: UInt64, releasingOthers: Bool,
                                    _ db: Database) throws {
        for (table, positions) in [("upstream", upstream), ("receipt", receipts)] {
            try db.execute(sql: """
                UPDATE \(table) SET claimedUntilMs = ? WHERE claimedBy = ? AND position IN (SELECT value FROM json_each(?))
                """, arguments: [Int64(clamping: untilMs), replica, Self.jsonArray(positions)])
            guard releasingOthers else { continue }
            try db.execute(sql: """
                UPDATE \(table) SET claimedBy = NULL, claimedUntilMs = NULL
                WHERE claimedBy = ? AND position NOT IN (SELECT value FROM json_each(?))
                """, arguments: [replica, Self.jsonArray(positions)])
        }
    }

    private static func releaseClaims(replica: String, upstream: [Int64], receipts: [Int64], _ db: Database) throws {
        for (table, positions) in [("upstream", upstream), ("receipt", receipts)] where !positions.isEmpty {
            try db.cachedStatement(sql: """
                UPDATE \(table) SET claimedBy = NULL, claimedUntilMs = NULL
                WHERE claimedBy = ? AND position IN (SELECT value FROM json_each(?))
                """).execute(arguments: [replica, Self.jsonArray(positions)])
        }
    }

    public func releaseAllClaims() async throws {
        try await pool.write { db in
            try db.execute(sql: """
                UPDATE upstream SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy IS NOT NULL;
                UPDATE receipt SET claimedBy = NULL, claimedUntilMs = NULL WHERE claimedBy IS NOT NULL
                """)
        }
    }

    // MARK: Group commit

    public func write(_ writes: [ConnectionWrite]) async throws -> [Result<ConnectionWriteResult, any Error>] {
        try await pool.write { db in
            var results = [Result<ConnectionWriteResult, any Error>?](repeating: nil, count: writes.count)
            for index in writes.applyingOrder {
                // A savepoint each: a write that fails takes back what it did, and only that.
                do {
                    var result: ConnectionWriteResult?
                    try db.inSavepoint {
                        result = try Self.apply(writes[index], db)
                        return .commit
                    }
                    results[index] = .success(result!)
                } catch {
                    results[index] = .failure(error)
                }
            }
            return results.map { $0! }
        }
    }

    private static func apply(_ write: ConnectionWrite, _ db: Database) throws -> ConnectionWriteResult {
        switch write {
        case .acceptUpstream(let message, let limit):
            return .accepted(try acceptUpstream(message, limit: limit, db))
        case .settleUpstream(let project, let device, let messageId, let verdict, let atMs):
            return .settled(try settleUpstream(project: project, device: device, messageId: messageId, verdict: verdict, atMs: atMs, db))
        case .removeReceipt(let project, let messageId):
            return .removed(try removeReceipt(project: project, messageId: messageId, db))
        case .addDownstream(let message, let limit):
            return .added(try addDownstream(message, limit: limit, db))
        case .releaseClaims(let replica, let upstream, let receipts):
            try releaseClaims(replica: replica, upstream: upstream, receipts: receipts, db)
            return .released
        case .renewClaims(let replica, let upstream, let receipts, let untilMs, let releasingOthers):
            try renewClaims(replica: replica, upstream: upstream, receipts: receipts, untilMs: untilMs, releasingOthers: releasingOthers,
                            db)
            return .released
        case .claim(let project, let replica, let nowMs, let untilMs, let graceMs, let limit):
            let receipts = try claimReceipts(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, limit: limit, db)
            let upstream = receipts.count < limit
                ? try claimUpstream(project: project, replica: replica, nowMs: nowMs, untilMs: untilMs, graceMs: graceMs,
                                    limit: limit - receipts.count, db)
                : []
            return .claimed(receipts: receipts, upstream: upstream)
        }
    }
}
