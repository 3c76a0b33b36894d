import Foundation
import GRDB
import Logging
import NearbyCore
@testable import NearbyServer
import PostgresNIO
import TestSupport
import Testing

extension StorageTests {
    /// `nearby-server migrate`'s copy from an SQLite file into a PostgreSQL
    /// database of the suite's cluster, read back through ``ServerStorage``.
    @Suite struct Migration {
        /// A new SQLite file in `directory` filled by ``MigrationFixture``,
        /// its storage closed as a stopped server leaves it, and what it
        /// reads back as.
        static func filledSQLite(in directory: URL) async throws -> (path: String, contents: MigrationFixture.Contents) {
            let path = directory.appendingPathComponent("nearby.sqlite").path
            let storage = try SQLiteStorage(path: path)
            try await MigrationFixture.fill(storage)
            let contents = try await MigrationFixture.contents(of: storage)
            try storage.pool.close()
            return (path, contents)
        }

        static func newDatabase() async throws -> String {
            try await #require(PostgresClusterTrait.current, "the suite has no PostgreSQL cluster").createDatabase()
        }

        /// Runs `body` on a storage of the database at `url`, closed after.
        static func withPostgres(_ url: String, _ body: (PostgresStorage) async throws -> Void) async throws {
            let storage = try await PostgresStorage(url: url)
            do {
                try await body(storage)
                await storage.close()
            } catch {
                await storage.close()
                throw error
            }
        }

        static let logger = Logger(label: "migration-tests")

        /// Runs `body` on a connection of its own to the database at `url`
        /// (opening a storage would create nearby-server's tables).
        static func withConnection<T: Sendable>(_ url: String, _ body: (PostgresConnection) async throws -> T) async throws -> T {
            let connection = try await PostgresConnection.connect(configuration: try PostgresLocation(url: url).connectionConfiguration,
                                                                  id: 1, logger: logger)
            do {
                let result = try await body(connection)
                try await connection.close()
                return result
            } catch {
                try? await connection.close()
                throw error
            }
        }

        /// The tables of the database's schema, by name.
        static func tables(of url: String) async throws -> [String] {
            try await withConnection(url) { connection in
                var tables: [String] = []
                for try await table in try await connection.query("""
                    SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1
                    """, logger: logger).decode(String.self) {
                    tables.append(table)
                }
                return tables
            }
        }

        @Test func everythingReadsBackEqualAndNewRowsComeAfterTheCopied() async throws {
            try await withTemporaryDirectory { directory in
                let (path, before) = try await Self.filledSQLite(in: directory)
                let url = try await Self.newDatabase()
                var migration = DatabaseMigration(sqlitePath: path, postgresURL: url)
                // Two rows a batch: tables of three rows take two.
                migration.batch = BatchLimit(rows: 2, bytes: 1 << 20)
                var reported: [CopiedTable] = []
                let summary = try await migration.run { reported.append($0) }
                #expect(summary.tables == reported)
                #expect(reported.map(\.name) == MigratedTables.all.map(\.name))
                #expect(reported.first { $0.name == "attachment" }?.rows == 2)
                #expect(summary.target == url)

                try await Self.withPostgres(url) { storage async throws in
                    #expect(try await MigrationFixture.contents(of: storage) == before)
                    // The credentials work: a device's secret, the keys of a project's clients and servers.
                    #expect(try await storage.device(secretHash: hash("secret-d1"))?.id == "d1")
                    #expect(try await storage.project(apiKeyHash: hash("api-alpha"))?.name == "alpha")
                    #expect(try await storage.project(adminKeyHash: hash("admin-alpha-2"))?.name == "alpha")
                    #expect(try await storage.isServerKey(hash("server-beta-2"), of: "beta"))
                    #expect(try await storage.pendingDownstream(device: "d1").map(\.messageId) == ["m1", "m2"])
                    try await Self.newRowsComeAfterTheCopied(storage, before)
                }
            }
        }

        /// Every position drawn after the migration is past every copied
        /// one, and past the positions SQLite gave to rows since deleted.
        static func newRowsComeAfterTheCopied(_ storage: PostgresStorage, _ before: MigrationFixture.Contents) async throws {
            let newest = try #require(before.receipts.last?.position)
            #expect(try await storage.addReceipt(StoredReceipt(project: "alpha", messageId: "dr2:r4", payload: "{}"), limit: 10) == 0)
            let receipts = try await storage.receipts(project: "alpha", after: 0, limit: 10)
            #expect(receipts.map(\.messageId) == ["dr2:r1", "dr2:r2", "dr2:r4"])
            // r3, removed before the migration, had the position after r2's.
            #expect(try #require(receipts.last?.position) > newest + 1)

            #expect(try await storage.acceptUpstream(StorageTests.Connection.upstream("u4"), limit: 10) == .kept)
            let upstream = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10)
            #expect(upstream.map(\.messageId) == ["u1", "u4"])
            #expect(try await storage.addDownstream(StorageTests.Connection.downstream("m3"), limit: 10))
            #expect(try await storage.pendingDownstream(device: "d1").map(\.messageId) == ["m1", "m2", "m3"])

            try await storage.registerBeacon(try StorageTests.Beacons.beacon(5))
            let page = try await storage.beacons(project: "alpha", filter: BeaconFilter(), after: 0, limit: 10)
            #expect(try page.beacons.map(\.id) == [beaconID(1), beaconID(2), beaconID(5)])
            let retired = try beaconID(MigrationFixture.retiredBeacon)
            await #expect(throws: StorageError.beaconRetired(retired.name)) {
                try await storage.registerBeacon(try StorageTests.Beacons.beacon(MigrationFixture.retiredBeacon))
            }
            let beacon = try beaconID(1)
            #expect(try await storage.addAttachment(StorageTests.Beacons.attachment("a4", of: beacon), project: "alpha"))
            #expect(try await storage.attachments(of: beacon, project: "alpha", filter: AttachmentFilter(namespaces: ["alpha-ns"]))
                .map(\.id) == ["a1", "a2", "a4"])

            #expect(try await storage.deleteDevice(id: "d2"))
            #expect(try await storage.deviceDeletions(after: before.deviceDeletions.position).devices == ["d2": "alpha"])
            #expect(try await storage.deleteProject(name: "beta"))
            #expect(try await storage.projectDeletions(after: before.projectDeletions.position).projects == ["beta"])
        }

        @Test func aTargetWithRowsIsRefusedAndKeptAsItWas() async throws {
            try await withTemporaryDirectory { directory in
                let (path, _) = try await Self.filledSQLite(in: directory)
                let url = try await Self.newDatabase()
                try await Self.withPostgres(url) { storage async throws in try await createProject(storage, "omega") }
                let error = try await #require(throws: MigrationError.self) {
                    try await DatabaseMigration(sqlitePath: path, postgresURL: url).run()
                }
                #expect(error.description == "the database \(url) is not empty: its table project has rows; migrate into a new, empty database")
                try await Self.withPostgres(url) { storage async throws in
                    #expect(try await storage.projects().map(\.project.name) == ["omega"])
                    #expect(try await storage.devices().isEmpty)
                }
            }
        }

        @Test func anotherApplicationsDatabaseIsRefusedUntouched() async throws {
            try await withTemporaryDirectory { directory in
                let (path, _) = try await Self.filledSQLite(in: directory)
                let url = try await Self.newDatabase()
                try await Self.withConnection(url) { connection in
                    _ = try await connection.query("CREATE TABLE invoice (id INTEGER)", logger: Self.logger)
                }
                let error = try await #require(throws: MigrationError.self) {
                    try await DatabaseMigration(sqlitePath: path, postgresURL: url).run()
                }
                #expect(error.description.contains("is not empty: it holds table public.invoice, and is not nearby-server's"),
                        "\(error.description)")
                #expect(try await Self.tables(of: url) == ["invoice"])
            }
        }

        /// A value the copy cannot take, found partway: the rows already
        /// inserted are rolled back, and once it is fixed the copy runs again.
        @Test func aFailurePartwayLeavesTheTargetWithoutARow() async throws {
            try await withTemporaryDirectory { directory in
                let (path, before) = try await Self.filledSQLite(in: directory)
                let queue = try DatabaseQueue(path: path)
                try await queue.write { db in try db.execute(sql: "UPDATE device SET lastSeenAtMs = 'soon' WHERE id = 'd2'") }
                try queue.close()
                let url = try await Self.newDatabase()
                let error = try await #require(throws: MigrationError.self) {
                    try await DatabaseMigration(sqlitePath: path, postgresURL: url).run()
                }
                #expect(error.description.hasPrefix("cannot copy table device into \(url), so nothing was copied: "), "\(error.description)")
                #expect(error.description.contains("device.lastSeenAtMs holds"), "\(error.description)")
                try await Self.withPostgres(url) { storage async throws in #expect(try await storage.projects().isEmpty) }

                let fixed = try DatabaseQueue(path: path)
                try await fixed.write { db in
                    try db.execute(sql: "UPDATE device SET lastSeenAtMs = createdAtMs WHERE id = 'd2'")
                }
                try fixed.close()
                _ = try await DatabaseMigration(sqlitePath: path, postgresURL: url).run()
                try await Self.withPostgres(url) { storage async throws in
                    #expect(try await storage.projects() == before.projects)
                }
            }
        }

        enum BadSource: String, CaseIterable {
            case missing, notSQLite, anotherApplications, olderSchema
        }

        /// Each is refused, saying why, before the target is touched.
        @Test(arguments: BadSource.allCases)
        func aSourceThatIsNotTheCurrentSchemaIsRefused(source: BadSource) async throws {
            try await withTemporaryDirectory { directory in
                let path = directory.appendingPathComponent("nearby.sqlite").path
                let expected: String
                switch source {
                case .missing:
                    expected = "cannot open the database \(path): no such file"
                case .notSQLite:
                    try Data(repeating: 0x4E, count: 4096).write(to: URL(fileURLWithPath: path))
                    expected = "cannot open the database \(path): file is not a database"
                case .anotherApplications:
                    let queue = try DatabaseQueue(path: path)
                    try await queue.write { db in try db.execute(sql: "CREATE TABLE note (text TEXT)") }
                    try queue.close()
                    expected = "\(path) is not a nearby-server database: it has no record of migrations (grdb_migrations)"
                case .olderSchema:
                    let queue = try DatabaseQueue(path: path)
                    try SQLiteStorage.migrator.migrate(queue, upTo: "v7")
                    try queue.close()
                    expected = "the database \(path) is at schema v7, this nearby-server's is \(SQLiteStorage.migrator.migrations.last!): bring it up to date first by "
                        + "running this nearby-server on it once (nearby-server project list --database \(path)), then migrate"
                }
                let url = try await Self.newDatabase()
                let error = await #expect(throws: (any Error).self) {
                    try await DatabaseMigration(sqlitePath: path, postgresURL: url).run()
                }
                #expect(error.map { "\($0)" } == expected)
                #expect(try await Self.tables(of: url).isEmpty)
            }
        }

        /// The tables and columns (with their types) of `schema` are those `listed`, a table at a time.
        static func expectSameTables(_ schema: [String: [String: String]], _ listed: [String: [String: String]], engine: String,
                                     sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(schema.keys.sorted() == listed.keys.sorted(), "the tables of \(engine)'s schema", sourceLocation: sourceLocation)
            for (table, columns) in listed where schema[table] != nil {
                #expect(schema[table] == columns, "the columns of \(engine)'s \(table)", sourceLocation: sourceLocation)
            }
        }

        /// The table list is both schemas': a table or column added to
        /// either and not to ``MigratedTables`` fails here.
        @Test func theTableListIsBothEnginesSchema() async throws {
            let sqliteTypes: [MigratedTable.Kind: String] = [.integer: "INTEGER", .text: "TEXT", .blob: "BLOB", .real: "REAL",
                                                             .boolean: "INTEGER"]
            let postgresTypes: [MigratedTable.Kind: String] = [.integer: "bigint", .text: "text", .blob: "bytea",
                                                               .real: "double precision", .boolean: "boolean"]
            var listed: [String: [String: MigratedTable.Kind]] = [:]
            for table in MigratedTables.all {
                listed[table.name] = Dictionary(uniqueKeysWithValues: (table.columns + table.notCopied).map { ($0.name, $0.kind) })
            }

            try await withTemporaryDirectory { directory in
                let storage = try SQLiteStorage(path: directory.appendingPathComponent("nearby.sqlite").path)
                let sqlite = try await storage.pool.read { db in
                    let names = try String.fetchAll(db, sql: """
                        SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations'
                        """)
                    return try Dictionary(uniqueKeysWithValues: names.map { table in
                        (table, Dictionary(uniqueKeysWithValues: try db.columns(in: table).map { ($0.name, $0.type) }))
                    })
                }
                Self.expectSameTables(sqlite, listed.mapValues { $0.mapValues { sqliteTypes[$0]! } }, engine: "SQLite")
            }

            try await Self.withPostgres(try await Self.newDatabase()) { storage in
                let (columns, serials) = try await storage.read { connection in
                    var columns: [String: [String: String]] = [:]
                    var serials: Set<String> = []
                    for try await (table, column, type, serial) in try await connection.query("""
                        SELECT table_name, column_name, data_type, COALESCE(column_default LIKE 'nextval(%', false)
                        FROM information_schema.columns WHERE table_schema = current_schema()
                        """, logger: storage.logger).decode((String, String, String, Bool).self) {
                        columns[table, default: [:]][column] = type
                        if serial { serials.insert("\(table).\(column)") }
                    }
                    return (columns, serials)
                }
                // PostgreSQL's own: the schema's version, messages among replicas, and their partition leases.
                let copied = columns.filter { !["schema_version", "replicamessage", "replicamember", "partitionlease"].contains($0.key) }
                var expected: [String: [String: String]] = [:]
                for (table, kinds) in listed {
                    expected[table.lowercased()] = Dictionary(uniqueKeysWithValues: kinds.map { ($0.key.lowercased(), postgresTypes[$0.value]!) })
                }
                Self.expectSameTables(copied, expected, engine: "PostgreSQL")
                let listedSerials = MigratedTables.all.compactMap { table in table.serial.map { "\(table.name.lowercased()).\($0)" } }
                #expect(serials.subtracting(["replicamessage.id"]) == Set(listedSerials))
            }
        }
    }
}
