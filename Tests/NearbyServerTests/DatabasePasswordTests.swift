import ConfigFile
import Foundation
@testable import NearbyServer
import TestSupport
import Testing

/// Where the PostgreSQL password may be kept, and where it may not: a
/// configuration file every user can read is refused when its `[database]
/// url` holds the password; `[database] password-file` (not readable by
/// every user) or `PGPASSWORD` give it instead, and a real PostgreSQL role
/// that needs the password is opened with either.
@Suite(.timeLimit(.minutes(3)))
struct DatabasePasswordTests {
    static func write(_ text: String, to path: String, mode: Int) throws {
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    /// The server will not start on a world-readable file holding the
    /// password, and says what to do in one line; 0640 is taken.
    @Test(.enabled(if: executable != nil, "needs the nearby-server executable"))
    func aWorldReadableFileHoldingThePasswordIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let config = directory.appendingPathComponent("nearby-server.conf").path
            try Self.write("""
                [http]
                listen = "127.0.0.1:0"
                [database]
                url = "postgres://nearby:hunter2@/venue?host=\(directory.path)"
                """, to: config, mode: 0o644)
            let refused = try await runProgram(executable!.path, ["serve", "--config", config])
            #expect(refused.status != 0)
            #expect(refused.output.contains("\(config) holds the database's password ([database] url) and every user may read it "
                + "(mode 644): chmod o-rwx \(config)"), "\(refused.output)")
            #expect(!refused.output.contains("hunter2"), "\(refused.output)")
            #expect(refused.output.split(separator: "\n").count == 1, "\(refused.output)")

            try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: config)
            let configuration = try ServerConfiguration.load(path: config, required: true)
            #expect(configuration.databaseURL != nil)
            // Without a password in it, a readable file is an ordinary one.
            try Self.write("[database]\nurl = \"postgres://nearby@/venue?host=\(directory.path)\"\n", to: config, mode: 0o644)
            #expect(try ServerConfiguration.load(path: config, required: true).databaseURL != nil)
        }
    }

    @Test func thePasswordFileIsCheckedAndItsFirstLineRead() async throws {
        try await withTemporaryDirectory { directory in
            let file = directory.appendingPathComponent("db-password").path
            var configuration = ServerConfiguration()
            configuration.databaseURL = "postgres://venue@db.example/venue"
            configuration.databasePasswordFile = file
            try configuration.validate()

            try Self.write("s3cret pass\nignored\n", to: file, mode: 0o640)
            #expect(try configuration.databasePassword(environment: ["PGPASSWORD": "other"]) == "s3cret pass")
            try Self.write("s3cret pass\r\n", to: file, mode: 0o600)
            #expect(try configuration.databasePassword(environment: [:]) == "s3cret pass")

            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
            let readable = try #require(throws: ConfigurationError.self) { try configuration.databasePassword(environment: [:]) }
            #expect(readable.message.contains("every user may read it (mode 644): chmod o-rwx \(file)"), "\(readable.message)")
            try Self.write("\n", to: file, mode: 0o600)
            let empty = try #require(throws: ConfigurationError.self) { try configuration.databasePassword(environment: [:]) }
            #expect(empty.message.contains("is empty"), "\(empty.message)")
            try Self.write(String(repeating: "x", count: SecretFile.maxBytes + 1), to: file, mode: 0o600)
            let large = try #require(throws: ConfigurationError.self) { try configuration.databasePassword(environment: [:]) }
            #expect(large.message.contains("at most \(SecretFile.maxBytes) bytes"), "\(large.message)")

            // Without the file, libpq's PGPASSWORD; a URL's own password wins over both.
            configuration.databasePasswordFile = nil
            #expect(try configuration.databasePassword(environment: ["PGPASSWORD": "from-env"]) == "from-env")
            #expect(try configuration.databasePassword(environment: [:]) == nil)
            configuration.databaseURL = "postgres://venue:inline@db.example/venue"
            #expect(try configuration.databasePassword(environment: ["PGPASSWORD": "from-env"]) == nil)

            // Both a password in the URL and a file, or a file for SQLite: one too many.
            let both = try #require(throws: ConfigurationError.self) {
                try ServerConfiguration.parse("[database]\nurl = \"postgres://venue:inline@h/venue\"\npassword-file = \"\(file)\"\n",
                                              source: "test.conf")
            }
            #expect(both.message.contains("set one"), "\(both.message)")
            let sqlite = try #require(throws: ConfigurationError.self) {
                try ServerConfiguration.parse("[database]\npath = \"/tmp/x.sqlite\"\npassword-file = \"\(file)\"\n", source: "test.conf")
            }
            #expect(sqlite.message.contains("password-file is for url"), "\(sqlite.message)")
        }
    }

    /// A role that must give its password: refused without one, opened with
    /// the password file's or PGPASSWORD's.
    @Test func aRoleThatNeedsItsPasswordIsOpenedWithTheFileOrPGPASSWORD() async throws {
        let cluster = try await PostgresCluster.start()
        do {
            let url = try await cluster.createDatabase()
            try await cluster.addPasswordRole("venue", password: "s3cret-pw")
            let roleURL = url.replacingOccurrences(of: "postgres://\(cluster.superuser)@", with: "postgres://venue@")
            let refused = try await #require(throws: DatabaseOpenError.self) { _ = try await PostgresStorage(url: roleURL) }
            #expect(refused.message.contains("venue"), "\(refused.message)")

            try await withTemporaryDirectory { directory in
                let file = directory.appendingPathComponent("db-password").path
                try Self.write("s3cret-pw\n", to: file, mode: 0o640)
                let config = directory.appendingPathComponent("nearby-server.conf").path
                try Self.write("[database]\nurl = \"\(roleURL)\"\npassword-file = \"\(file)\"\n", to: config, mode: 0o644)
                let fromFile = try await ServerConfiguration.load(path: config, required: true).openStorage()
                try await fromFile.createProject(project("venue"), apiKeyHash: hash("a"), adminKeyHash: hash("b"),
                                                 serverKeyHash: hash("c"))
                await (fromFile as? PostgresStorage)?.close()

                var configuration = ServerConfiguration()
                configuration.databaseURL = roleURL
                let fromEnvironment = try await PostgresStorage(
                    url: roleURL, password: try configuration.databasePassword(environment: ["PGPASSWORD": "s3cret-pw"]))
                #expect(try await fromEnvironment.project(name: "venue") != nil)
                await fromEnvironment.close()
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }
}
