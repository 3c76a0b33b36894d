import Foundation
import GRDB

/// The SQLite database `nearby-server migrate` copies from, read in batches
/// under its write lock: what is copied is one snapshot, and nobody writes
/// the file meanwhile. The migration never changes it, so it stays what it
/// was, to go back to.
final class SQLiteMigrationSource: Sendable {
    let path: String
    private let queue: DatabaseQueue

    /// Opens the nearby-server database at `path` and takes its write lock
    /// until ``close()``. Refuses a missing file, one another process has
    /// open (a running server), one that is not SQLite or not
    /// nearby-server's, and one whose schema is not this server's: an older
    /// one is brought up to date by running this server on it once (any
    /// command that opens it does), not here, so that the source is never written.
    init(path: String) async throws {
        guard FileManager.default.fileExists(atPath: path) else {
            throw DatabaseOpenError(message: "cannot open the database \(path): no such file")
        }
        // Before this process opens the file itself: closing the descriptor
        // the check opens would drop this process's own locks on it.
        if let pid = SQLiteFileUsers.otherProcess(usingDatabaseAt: path) {
            let holder = pid > 0 ? "process \(pid)" : "another process"
            throw MigrationError("the database \(path) is open in \(holder) (a running nearby-server?): stop it, then migrate")
        }
        var configuration = Configuration()
        configuration.label = "nearby-server migrate"
        // A writer that got in first finishes within this; the lock is then ours.
        configuration.busyMode = .timeout(5)
        // The write lock stays held across the batches, each a database access of its own.
        configuration.allowsUnsafeTransactions = true
        do {
            queue = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            throw DatabaseOpenError(message: "cannot open the database \(path): \(Self.reason(error))")
        }
        self.path = path
        try await queue.writeWithoutTransaction { db in
            try Self.checkSchema(db, path: path)
            do {
                try db.execute(sql: "BEGIN IMMEDIATE")
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
                throw MigrationError("""
                    the database \(path) is being written by another process: stop the nearby-server that uses it, then migrate
                    """)
            } catch {
                throw MigrationError("cannot lock the database \(path) against writes while it is copied: \(Self.reason(error))")
            }
        }
    }

    /// Ends the read (nothing was written) and closes the file.
    func close() async {
        _ = try? await queue.writeWithoutTransaction { db in
            if db.isInsideTransaction { try db.execute(sql: "ROLLBACK") }
        }
        try? queue.close()
    }

    /// Refuses a file that is not a nearby-server database at this server's schema version.
    private static func checkSchema(_ db: Database, path: String) throws {
        let migrator = SQLiteStorage.migrator
        let applied: [String]
        do {
            guard try db.tableExists("grdb_migrations") else {
                throw MigrationError("\(path) is not a nearby-server database: it has no record of migrations (grdb_migrations)")
            }
            applied = try migrator.appliedMigrations(db)
        } catch let error as DatabaseError {
            throw DatabaseOpenError(message: "cannot open the database \(path): \(reason(error))")
        }
        let known = migrator.migrations
        if let unknown = applied.first(where: { !known.contains($0) }) {
            throw MigrationError("""
                the database \(path) was made by a newer nearby-server (its schema has migration \(unknown), which this one \
                does not know): migrate it with that version
                """)
        }
        let missing = known.filter { !applied.contains($0) }
        guard missing.isEmpty else {
            throw MigrationError("""
                the database \(path) is at schema \(applied.last ?? "none"), this nearby-server's is \(known.last ?? ""): \
                bring it up to date first by running this nearby-server on it once (nearby-server project list \
                --database \(path)), then migrate
                """)
        }
    }

    /// Reads `table`'s rows after `rowid`, in rowid order, until `batch` is full.
    func rows(of table: MigratedTable, after rowid: Int64, batch: BatchLimit) async throws -> SourceRows {
        try await queue.writeWithoutTransaction { db in
            let columns = table.columns.map(\.name).joined(separator: ", ")
            let cursor = try Row.fetchCursor(db, sql: "SELECT rowid, \(columns) FROM \(table.name) WHERE rowid > ? ORDER BY rowid",
                                             arguments: [rowid])
            var read = SourceRows(rows: [], lastRowID: rowid)
            var bytes = 0
            while read.rows.count < batch.rows, bytes < batch.bytes, let row = try cursor.next() {
                read.lastRowID = row[0]
                let values = try table.columns.enumerated().map { index, column in
                    try MigratedValue(row[index + 1] as DatabaseValue, kind: column.kind, table: table.name, column: column.name)
                }
                bytes += values.reduce(0) { $0 + $1.size }
                read.rows.append(values)
            }
            return read
        }
    }

    /// The largest position `table`'s AUTOINCREMENT column ever had (0 if none):
    /// positions of deleted rows are never given again.
    func largestPosition(of table: MigratedTable) async throws -> Int64 {
        try await queue.writeWithoutTransaction { db in
            try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = ?", arguments: [table.name]) ?? 0
        }
    }

    /// SQLite's own words, without GRDB's "SQLite error N:" and statement.
    static func reason(_ error: any Error) -> String {
        (error as? DatabaseError)?.message ?? "\(error)"
    }
}

/// How much one batch holds at most: so many rows, or so many bytes of
/// values (publications' contents and attachments' data are up to 100 KiB
/// each), whichever comes first; at least one row.
struct BatchLimit: Sendable {
    var rows: Int
    var bytes: Int

    static let standard = BatchLimit(rows: 1000, bytes: 4 << 20)
}

/// A batch of rows read, and the rowid of the last, where the next starts.
struct SourceRows: Sendable {
    var rows: [[MigratedValue]]
    var lastRowID: Int64
}
