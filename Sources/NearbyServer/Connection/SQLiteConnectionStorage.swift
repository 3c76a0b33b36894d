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

    public func acceptUpstream(_ message: StoredUpstream, limit: Int) async throws -> UpstreamAcceptance {
        let data = try StoredColumns.json(message.data)
        return try await pool.write { db in
            if let known = try Row.fetchOne(db, sql: "SELECT \(Self.upstreamColumns) FROM upstream WHERE device = ? AND app = ? AND messageId = ?",
                                            arguments: [message.device, message.app, message.messageId]) {
                return .known(try Self.upstream(known))
            }
            // The unique (device, app, messageId) index counts them.
            let kept = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM upstream WHERE device = ?", arguments: [message.device]) ?? 0
            guard kept < limit else { return .full(kept) }
            try db.execute(sql: """
                INSERT INTO upstream (project, device, app, messageId, data, receivedAtMs, expiresAtMs) VALUES (?, ?, ?, ?, ?, ?, ?)
                """, arguments: [message.project, message.device, message.app, message.messageId, data,
                                 Int64(clamping: message.receivedAtMs), Int64(clamping: message.expiresAtMs)])
            return .kept
        }
    }

    public func pendingUpstream(project: String, after position: Int64, limit: Int) async throws -> [StoredUpstream] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(Self.upstreamColumns) FROM upstream WHERE project = ? AND verdict IS NULL AND position > ?
                ORDER BY position LIMIT ?
                """, arguments: [project, position, limit]).map(Self.upstream)
        }
    }

    public func settleUpstream(project: String, device: String, messageId: String, verdict: UpstreamVerdict,
                               atMs: UInt64) async throws -> StoredUpstream? {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db, sql: """
                SELECT \(Self.upstreamColumns) FROM upstream WHERE device = ? AND messageId = ? AND project = ? AND verdict IS NULL
                ORDER BY position LIMIT 1
                """, arguments: [device, messageId, project]) else { return nil }
            var message = try Self.upstream(row)
            let (code, description) = StoredColumns.columns(of: verdict)
            try db.execute(sql: "UPDATE upstream SET verdict = ?, verdictDescription = ?, settledAtMs = ? WHERE position = ?",
                           arguments: [code, description, Int64(clamping: atMs), message.position])
            message.verdict = verdict
            return message
        }
    }

    public func expiredUpstream(nowMs: UInt64, limit: Int) async throws -> [StoredUpstream] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT \(Self.upstreamColumns) FROM upstream WHERE verdict IS NULL AND expiresAtMs <= ? ORDER BY expiresAtMs LIMIT ?
                """, arguments: [Int64(clamping: nowMs), limit]).map(Self.upstream)
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

    public func addDownstream(_ message: StoredDownstream, limit: Int) async throws -> Bool {
        let data = try StoredColumns.json(message.data)
        return try await pool.write { db in
            let waiting = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM downstream WHERE device = ?", arguments: [message.device]) ?? 0
            guard waiting < limit else { return false }
            try db.execute(sql: """
                INSERT INTO downstream (project, device, messageId, data, receivedAtMs, expiresAtMs, receiptRequested)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """, arguments: [message.project, message.device, message.messageId, data, Int64(clamping: message.receivedAtMs),
                                 Int64(clamping: message.expiresAtMs), message.receiptRequested])
            return true
        }
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

    public func removeReceipt(project: String, messageId: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM receipt WHERE project = ? AND messageId = ?", arguments: [project, messageId])
            return db.changesCount > 0
        }
    }
}
