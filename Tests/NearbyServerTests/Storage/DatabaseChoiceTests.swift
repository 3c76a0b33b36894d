import Foundation
@testable import NearbyServer
import Testing

extension StorageTests {
    /// `[database]` chooses the engine: the server and its CLI open PostgreSQL at `url`.
    @Suite struct DatabaseChoice {
        @Test func urlChoosesPostgreSQLAndPathStaysTheDefault() throws {
            #expect(ServerConfiguration().databaseURL == nil)
            let postgres = try ServerConfiguration.parse("[database]\nurl = \"postgres://nearby:pw@db/venue\"", source: "test.conf")
            #expect(postgres.databaseURL == "postgres://nearby:pw@db/venue")
            #expect(postgres.databaseName == "postgres://nearby@db/venue")
            let sqlite = try ServerConfiguration.parse("[database]\npath = \"/tmp/x.sqlite\"", source: "test.conf")
            #expect(sqlite.databaseURL == nil)
            #expect(sqlite.databaseName == "/tmp/x.sqlite")
        }

        @Test(arguments: [
            ("[database]\npath = \"/tmp/x.sqlite\"\nurl = \"postgres://u@h/db\"", "test.conf: [database] has both path (a SQLite file) and url"),
            ("[database]\nurl = \"postgres://h/db\"", "test.conf: [database] url: the database URL postgres://h/db names no user"),
            ("[database]\nurl = \"sqlite:///x\"", "[database] url: the database URL must start with postgres://"),
        ])
        func badDatabaseSettingsAreRefused(text: String, message: String) {
            #expect {
                try ServerConfiguration.parse(text, source: "test.conf")
            } throws: { error in
                "\(error)".contains(message)
            }
        }

        /// What the server acknowledges survives a power failure: SQLite
        /// syncs every commit (GRDB's pool would leave it at NORMAL).
        @Test func sqliteCommitsAreSyncedToDisk() async throws {
            try await withTemporaryDirectory { directory in
                let storage = try SQLiteStorage(path: directory.appendingPathComponent("nearby.sqlite").path)
                let mode = try await storage.pool.write { try Int.fetchOne($0, sql: "PRAGMA synchronous") }
                #expect(mode == 2, "PRAGMA synchronous is \(mode.map(String.init) ?? "unknown"), not FULL (2)")
            }
        }

        @Test func theServerServesFromPostgreSQL() async throws {
            let cluster = try #require(PostgresClusterTrait.current)
            let url = try await cluster.createDatabase()
            try await withServer(configure: { $0.databaseURL = url }) { harness in
                let key = try await harness.createProject("alpha")
                let device = try await harness.register(apiKey: key)
                try await harness.publish(device, "p1")
                try await harness.subscribe(device, "s1")
                let storage = try await PostgresStorage(url: url)
                #expect(try await storage.devices().map(\.id) == [device.id])
                #expect(try await storage.publications(device: device.id).map(\.id) == ["p1"])
                #expect(try await storage.subscriptions(device: device.id).map(\.id) == ["s1"])
                await storage.close()
            }
        }

        @Test(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"))
        func projectCommandsWorkOnPostgreSQL() async throws {
            let cluster = try #require(PostgresClusterTrait.current)
            let database = ["--database", try await cluster.createDatabase()]
            #expect(try await run(["project", "create", "alpha"] + database).status == 0)
            let duplicate = try await run(["project", "create", "alpha"] + database)
            #expect(duplicate.status == 1)
            #expect(duplicate.errors == "nearby-server: a project named 'alpha' already exists\n")
            #expect(try await run(["project", "list"] + database).output.hasPrefix("alpha\t"))
            #expect(try await run(["project", "delete", "alpha"] + database).status == 0)
            #expect(try await !run(["project", "list"] + database).output.contains("alpha"))

            let unreachable = try await run(["project", "list", "--database", "postgres://nearby:pw@/none?host=/nonexistent"])
            #expect(unreachable.status == 1)
            #expect(unreachable.errors.hasPrefix("nearby-server: cannot open the database postgres://nearby@/none?host=/nonexistent: "),
                    "\(unreachable.errors)")
        }
    }
}
