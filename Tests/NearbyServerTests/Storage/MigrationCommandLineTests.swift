import Foundation
@testable import NearbyServer
import TestSupport
import Testing

extension StorageTests {
    /// The real `nearby-server migrate`, against a database of the suite's cluster.
    @Suite(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"))
    struct MigrationCommandLine {
        /// Runs the executable, bounded.
        static func nearbyServer(_ arguments: [String]) async throws -> Run {
            try await withTimeout(120, "nearby-server \(arguments.prefix(2).joined(separator: " "))") { try await run(arguments) }
        }

        static func newDatabase() async throws -> String {
            try await #require(PostgresClusterTrait.current, "the suite has no PostgreSQL cluster").createDatabase()
        }

        @Test func copiesEveryTableAndRefusesToCopyTwice() async throws {
            try await withTemporaryDirectory { directory in
                let path = directory.appendingPathComponent("nearby.sqlite").path
                let created = try await Self.nearbyServer(["project", "create", "alpha", "--json", "--database", path])
                #expect(created.status == 0)
                let keys = try #require(try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: String])
                let url = try await Self.newDatabase()

                let migrated = try await Self.nearbyServer(["migrate", "--from", "sqlite:\(path)", "--to", url])
                #expect(migrated.status == 0, "\(migrated.errors)")
                #expect(migrated.errors.isEmpty)
                var lines = migrated.output.split(separator: "\n").map(String.init)
                let summary = lines.popLast() ?? ""
                let withRows: Set = ["project", "apiKey", "adminKey", "serverKey", "namespace"]
                #expect(lines == MigratedTables.all.map { "\($0.name): \(withRows.contains($0.name) ? 1 : 0)" })
                let expected = "migrated 5 rows in \(MigratedTables.all.count) tables from \(path) to \(url) in "
                #expect(summary.hasPrefix(expected), "\(summary)")
                #expect(summary.dropFirst(expected.count).wholeMatch(of: #/\d+\.\d s/#) != nil, "\(summary)")

                // The server's own commands find the project, by its admin key too.
                let listed = try await Self.nearbyServer(["project", "list", "--database", url])
                #expect(listed.output.hasPrefix("alpha\tnamespace=alpha\tdevices=0\t"), "\(listed.output)")
                try await StorageTests.Migration.withPostgres(url) { storage async throws in
                    #expect(try await storage.project(adminKeyHash: Credentials.hash(try #require(keys["adminKey"])))?.name == "alpha")
                }

                let again = try await Self.nearbyServer(["migrate", "--from", "sqlite:\(path)", "--to", url])
                #expect(again.status == 1)
                #expect(again.output.isEmpty)
                #expect(again.errors == "nearby-server: the database \(url) is not empty: its table project has rows; migrate into a new, empty database\n")
            }
        }

        /// A server that has the file open is named by its process id; once stopped, the copy runs.
        @Test func aRunningServerIsRefused() async throws {
            try await withTemporaryDirectory { directory in
                let server = try await ServerProcess.start(in: directory)
                let url = try await Self.newDatabase()
                let arguments = ["migrate", "--from", "sqlite:\(server.databasePath)", "--to", url]
                let refused = try await Self.nearbyServer(arguments)
                await server.stop()
                #expect(refused.status == 1)
                #expect(refused.errors == """
                    nearby-server: the database \(server.databasePath) is open in process \(server.process.pid) (a running \
                    nearby-server?): stop it, then migrate

                    """)
                #expect(try await StorageTests.Migration.tables(of: url).isEmpty)
                let migrated = try await Self.nearbyServer(arguments)
                #expect(migrated.status == 0, "\(migrated.errors)")
            }
        }

        @Test func anUnreachableTargetIsNamedWithoutItsPassword() async throws {
            try await withTemporaryDirectory { directory in
                let path = directory.appendingPathComponent("nearby.sqlite").path
                #expect(try await Self.nearbyServer(["project", "create", "alpha", "--database", path]).status == 0)
                let socket = directory.appendingPathComponent("no-postgres").path
                let failed = try await Self.nearbyServer(["migrate", "--from", "sqlite:\(path)",
                                                          "--to", "postgres://nearby:hunter2@/venue?host=\(socket)"])
                #expect(failed.status == 1)
                #expect(failed.errors.hasPrefix("nearby-server: cannot open the database postgres://nearby@/venue?host=\(socket): "),
                        "\(failed.errors)")
                #expect(!failed.errors.contains("hunter2"))
                #expect(failed.errors.split(separator: "\n").count == 1)
            }
        }

        /// Without --to, the configuration file's [database] url: no password on the command line.
        @Test func theTargetDefaultsToTheConfiguredURL() async throws {
            try await withTemporaryDirectory { directory in
                let path = directory.appendingPathComponent("nearby.sqlite").path
                #expect(try await Self.nearbyServer(["project", "create", "alpha", "--database", path]).status == 0)
                let url = try await Self.newDatabase()
                let config = directory.appendingPathComponent("nearby-server.conf").path
                try Data("[database]\nurl = \"\(url)\"\n".utf8).write(to: URL(fileURLWithPath: config))
                let migrated = try await Self.nearbyServer(["migrate", "--from", "sqlite:\(path)", "--config", config])
                #expect(migrated.status == 0, "\(migrated.errors)")
                #expect(try await Self.nearbyServer(["project", "list", "--config", config]).output.hasPrefix("alpha\t"))

                let bare = directory.appendingPathComponent("bare.conf").path
                try Data("[database]\npath = \"\(path)\"\n".utf8).write(to: URL(fileURLWithPath: bare))
                let unnamed = try await Self.nearbyServer(["migrate", "--from", "sqlite:\(path)", "--config", bare])
                #expect(unnamed.status == 64)
                #expect(unnamed.errors.contains("no --to, and \(bare) has no [database] url"), "\(unnamed.errors)")
            }
        }

        @Test func helpAndUsage() async throws {
            let help = try await Self.nearbyServer(["migrate", "--help"])
            #expect(help.status == 0)
            #expect(help.output.contains("--from <sqlite:path>"), "\(help.output)")
            #expect(help.output.contains("Before: stop the server"), "\(help.output)")
            let listed = try await Self.nearbyServer(["--help"])
            #expect(listed.output.contains("migrate"))

            let usage = try await Self.nearbyServer(["migrate", "--from", "/var/lib/nearby-server/nearby.sqlite", "--to", "postgres://u@h/db"])
            #expect(usage.status == 64)
            #expect(usage.errors.contains("--from must be sqlite:PATH"), "\(usage.errors)")
        }
    }
}
