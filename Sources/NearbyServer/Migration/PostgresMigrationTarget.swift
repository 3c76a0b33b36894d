import Logging
import PostgresNIO

/// The PostgreSQL database `nearby-server migrate` copies into, over one
/// connection of its own: its schema is applied as a server starting on it
/// applies it, and the copy is then one transaction, all or nothing.
final class PostgresMigrationTarget: Sendable {
    let location: PostgresLocation
    private let connection: PostgresConnection
    private let logger: Logger

    /// Connects to the database at `location` and applies this server's schema
    /// (``PostgresSchema``). Refuses, before writing anything, a database
    /// that holds tables of something else, or nearby-server's of a newer
    /// version. Throws ``DatabaseOpenError`` naming the URL without its password.
    init(location: PostgresLocation, logger: Logger) async throws {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: try location.connectionConfiguration, id: 0, logger: logger)
        } catch {
            throw location.openError(error)
        }
        self.location = location
        self.connection = connection
        self.logger = logger
        do {
            try await checkOwner()
            try await PostgresSchema.migrate(connection, logger: logger)
        } catch let error as MigrationError {
            await close()
            throw error
        } catch {
            await close()
            throw location.openError(error)
        }
    }

    func close() async {
        try? await connection.close()
    }

    /// Refuses a database with tables but no `schema_version` (another
    /// application's), or one whose schema a newer nearby-server made. An
    /// empty one, or one whose nearby-server schema is empty (made by
    /// opening it, `nearby-server project list --database URL`), is taken.
    private func checkOwner() async throws {
        guard let first = try await scalar(String.self, """
            SELECT table_schema || '.' || table_name FROM information_schema.tables
            WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1 LIMIT 1
            """) else { return }
        guard try await scalar(Bool.self, "SELECT to_regclass('schema_version') IS NOT NULL") == true else {
            throw MigrationError("""
                the database \(location.redacted) is not empty: it holds table \(first), and is not nearby-server's; \
                migrate into a new, empty database
                """)
        }
        let newest = PostgresSchema.migrations.map(\.version).max() ?? 0
        let version = try await scalar(Int32.self, "SELECT COALESCE(MAX(version), 0) FROM schema_version") ?? 0
        guard version <= newest else {
            throw MigrationError("""
                the database \(location.redacted) has schema version \(version), made by a newer nearby-server (this one's \
                is \(newest)): migrate into a new, empty database
                """)
        }
    }

    /// Begins the copy's transaction and refuses, naming the table, a
    /// database whose tables already hold rows.
    func begin() async throws {
        try await run("BEGIN")
        for table in MigratedTables.all {
            guard try await scalar(Bool.self, "SELECT EXISTS (SELECT 1 FROM \(unescaped: table.name))") == false else {
                throw MigrationError("""
                    the database \(location.redacted) is not empty: its table \(table.name) has rows; migrate into a new, \
                    empty database
                    """)
            }
        }
    }

    /// Inserts `rows`, in `table`'s column order, with one statement.
    /// PostgreSQL takes at most 65535 parameters a statement: a batch of
    /// 1000 rows of at most 15 columns is far below.
    func insert(_ rows: [[MigratedValue]], into table: MigratedTable) async throws {
        guard !rows.isEmpty else { return }
        let width = table.columns.count
        var bindings = PostgresBindings(capacity: rows.count * width)
        var tuples: [String] = []
        tuples.reserveCapacity(rows.count)
        for (index, row) in rows.enumerated() {
            let first = index * width + 1
            tuples.append("(" + (first..<first + width).map { "$\($0)" }.joined(separator: ", ") + ")")
            for value in row { value.bind(into: &bindings) }
        }
        let columns = table.columns.map(\.name).joined(separator: ", ")
        try await run(PostgresQuery(unsafeSQL: "INSERT INTO \(table.name) (\(columns)) VALUES \(tuples.joined(separator: ", "))",
                                    binds: bindings))
    }

    /// Sets `table`'s sequence so that the next row inserted gets a position
    /// past every position copied and past `largest`, the largest SQLite
    /// ever gave: positions are never given twice, as in SQLite.
    func continueSequence(of table: MigratedTable, past largest: Int64) async throws {
        guard let serial = table.serial else { return }
        try await run("""
            SELECT setval(pg_get_serial_sequence(\(table.name), \(serial)),
                          GREATEST(COALESCE(MAX(\(unescaped: serial)), 0), \(largest)) + 1, false)
            FROM \(unescaped: table.name)
            """)
    }

    func commit() async throws {
        try await run("COMMIT")
    }

    /// Ends the transaction with nothing written (also after a failed statement).
    func rollback() async {
        _ = try? await connection.query("ROLLBACK", logger: logger)
    }

    /// The first row's one column, if there is a row.
    private func scalar<T: PostgresDecodable & Sendable>(_ type: T.Type, _ query: PostgresQuery) async throws -> T? {
        do {
            var found: T?
            for try await value in try await connection.query(query, logger: logger).decode(T.self) where found == nil {
                found = value
            }
            return found
        } catch let error as PSQLError {
            throw PostgresFailure(error)
        }
    }

    /// Runs a statement; PostgreSQL's refusal comes out in its words (``PostgresFailure``).
    private func run(_ query: PostgresQuery) async throws {
        do {
            try await connection.query(query, logger: logger)
        } catch let error as PSQLError {
            throw PostgresFailure(error)
        }
    }
}
