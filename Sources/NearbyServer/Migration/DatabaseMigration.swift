import Logging

/// `nearby-server migrate`: copies a nearby-server's SQLite database into a
/// new PostgreSQL database, for a deployment that moves to PostgreSQL
/// (to run replicas, say). Every table of ``MigratedTables`` is copied row
/// for row, credentials' hashes, positions and times included, so that the
/// PostgreSQL database behaves as the SQLite one did: devices, API keys,
/// admin and server keys still authenticate, pending messages are still
/// delivered, beacon page tokens still page.
///
/// The SQLite file must be at this server's schema version and not in use
/// (the server stopped); it is only read, under its write lock. The
/// PostgreSQL database must be empty: its schema is applied first, as a
/// server starting on it applies it, then the rows are copied in one
/// transaction, in batches (``BatchLimit``), so that a failure leaves it
/// as empty as it was and a large database is never in memory whole. The
/// sequences of the positions are set past the largest SQLite gave.
public struct DatabaseMigration: Sendable {
    /// The SQLite database file to read.
    public var sqlitePath: String
    /// The PostgreSQL database to fill, as `[database] url` names it.
    public var postgresURL: String
    /// The password, when the URL has none.
    public var password: String?
    /// How much each batch copies at most (smaller in tests, to cross batches).
    var batch = BatchLimit.standard

    public init(sqlitePath: String, postgresURL: String, password: String? = nil) {
        self.sqlitePath = sqlitePath
        self.postgresURL = postgresURL
        self.password = password
    }

    /// Copies every table, calling `tableCopied` after each, and says what
    /// was copied. Throws ``DatabaseOpenError`` when either database
    /// cannot be opened and ``MigrationError`` when either is refused; any
    /// failure leaves the PostgreSQL database without a row.
    public func run(tableCopied: (CopiedTable) -> Void = { _ in }) async throws -> MigrationSummary {
        // The URL's mistakes are told before anything is opened.
        let location = try PostgresLocation(url: postgresURL, password: password)
        let logger = Logger(label: "nearby-server.migrate")
        let source = try await SQLiteMigrationSource(path: sqlitePath)
        let target: PostgresMigrationTarget
        do {
            target = try await PostgresMigrationTarget(location: location, logger: logger)
        } catch {
            await source.close()
            throw error
        }
        do {
            try await target.begin()
            var copied: [CopiedTable] = []
            for table in MigratedTables.all {
                let rows = try await copy(table, from: source, to: target)
                copied.append(CopiedTable(name: table.name, rows: rows))
                tableCopied(copied[copied.count - 1])
            }
            try await target.commit()
            await target.close()
            await source.close()
            return MigrationSummary(tables: copied, target: location.redacted)
        } catch {
            await target.rollback()
            await target.close()
            await source.close()
            throw error
        }
    }

    /// Copies one table in batches; returns how many rows.
    private func copy(_ table: MigratedTable, from source: SQLiteMigrationSource, to target: PostgresMigrationTarget) async throws -> Int {
        var count = 0
        // Below any rowid SQLite gives, negative ones included.
        var after = Int64.min
        do {
            while true {
                let read = try await source.rows(of: table, after: after, batch: batch)
                guard !read.rows.isEmpty else { break }
                try await target.insert(read.rows, into: table)
                count += read.rows.count
                after = read.lastRowID
            }
            try await target.continueSequence(of: table, past: try await source.largestPosition(of: table))
        } catch {
            throw MigrationError("cannot copy table \(table.name) into \(target.location.redacted), so nothing was copied: \(error)")
        }
        return count
    }
}

/// A table copied, and how many rows it had.
public struct CopiedTable: Sendable, Equatable {
    public var name: String
    public var rows: Int

    public init(name: String, rows: Int) {
        self.name = name
        self.rows = rows
    }
}

/// What a migration copied, and where to.
public struct MigrationSummary: Sendable, Equatable {
    /// Every table, in the order copied.
    public var tables: [CopiedTable]
    /// The PostgreSQL URL without its password.
    public var target: String

    /// Rows copied in all.
    public var rows: Int { tables.reduce(0) { $0 + $1.rows } }
}

/// A migration refused or failed: what was wrong, with which database.
public struct MigrationError: Error, CustomStringConvertible {
    public var description: String

    init(_ description: String) {
        self.description = description
    }
}
