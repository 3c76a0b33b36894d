import Foundation
@testable import NearbyServer
import NIOSSL
import Testing

extension StorageTests {
    /// What opening a PostgreSQL database says when it cannot, and what it accepts.
    @Suite struct PostgresOpening {
        @Test(arguments: [
            ("mysql://u@h/db", "must start with postgres://"),
            ("postgres://h/db", "names no user"),
            ("postgres://u@/db", "names no host"),
            ("postgres://u@h/db?sslmode=maybe", "sslmode 'maybe'"),
            ("postgres://u@h/db?timeout=3", "the parameter 'timeout'"),
            ("postgres://u@h/a/b", "a database with a '/'"),
            ("postgres://u@h/db?host=/run/postgresql", "both a host and a socket directory"),
        ])
        func badURLsAreRefusedWithTheReason(url: String, reason: String) async throws {
            let error = try #require(throws: DatabaseOpenError.self) { try PostgresLocation(url: url) }
            #expect(error.message.contains(reason), "\(error.message)")
        }

        /// libpq also reads a password= parameter: refused, and not repeated in the message.
        @Test func aPasswordParameterIsRefusedWithoutBeingRepeated() throws {
            let error = try #require(throws: DatabaseOpenError.self) {
                try PostgresLocation(url: "postgres://u@h/db?sslmode=require&password=hunter2")
            }
            #expect(error.message.contains("the parameter 'password'"), "\(error.message)")
            #expect(!error.message.contains("hunter2"), "\(error.message)")
            #expect(error.message.contains("postgres://u@h/db?sslmode=require "), "\(error.message)")
        }

        /// prefer and require encrypt without checking the certificate, as libpq's do; verify-* check it.
        @Test(arguments: [("prefer", CertificateVerification.none), ("require", .none), ("verify-ca", .noHostnameVerification),
                          ("verify-full", .fullVerification)])
        func sslModesAreLibpqs(mode: String, verification: CertificateVerification) throws {
            let location = try PostgresLocation(url: "postgres://u@h/db?sslmode=\(mode)")
            #expect(location.tls.rawValue == mode)
            #expect(location.tlsConfiguration.certificateVerification == verification)
        }

        @Test func urlsNameTheirEndpoint() throws {
            let tcp = try PostgresLocation(url: "postgresql://nearby:s%40cret@db.example:6543/venue?sslmode=require")
            #expect(tcp.endpoint == .tcp(host: "db.example", port: 6543))
            #expect(tcp.username == "nearby")
            #expect(tcp.password == "s@cret")
            #expect(tcp.database == "venue")
            #expect(tcp.tls == .require)
            #expect(tcp.redacted == "postgresql://nearby@db.example:6543/venue?sslmode=require")
            let socket = try PostgresLocation(url: "postgres://nearby@/venue?host=/run/postgresql")
            #expect(socket.endpoint == .socket("/run/postgresql/.s.PGSQL.5432"))
            #expect(try PostgresLocation(url: "postgres://nearby@localhost").database == "nearby")
        }

        @Test func anUnreachableDatabaseIsNamedWithoutItsPassword() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("no-postgres-\(UUID().uuidString)").path
            let error = try await #require(throws: DatabaseOpenError.self) {
                try await PostgresStorage(url: "postgres://nearby:hunter2@/venue?host=\(directory)")
            }
            #expect(error.message.hasPrefix("cannot open the database postgres://nearby@/venue?host=\(directory): "), "\(error.message)")
            #expect(!error.message.contains("hunter2"))
        }

        @Test func aMissingDatabaseIsToldInTheServersWords() async throws {
            let cluster = try #require(PostgresClusterTrait.current)
            let url = try await cluster.createDatabase()
            let missing = url.replacingOccurrences(of: "@/test_", with: "@/missing_")
            let error = try await #require(throws: DatabaseOpenError.self) { try await PostgresStorage(url: missing) }
            #expect(error.message.contains("does not exist"), "\(error.message)")
        }

        @Test func migrationsAreAppliedOnce() async throws {
            let cluster = try #require(PostgresClusterTrait.current)
            let url = try await cluster.createDatabase()
            let first = try await PostgresStorage(url: url)
            try await createProject(first, "alpha")
            await first.close()
            // Opened again: the schema and what it holds are kept.
            let second = try await PostgresStorage(url: url)
            #expect(try await second.projects().map(\.project.name) == ["alpha"])
            await second.close()
        }
    }
}
