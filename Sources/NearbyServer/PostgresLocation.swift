import Foundation
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL database is, read from the URL of `[database] url`:
///
/// - `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` over TCP (port 5432
///   unless given), with `?sslmode=disable`, `prefer` (the default: TLS when
///   the server offers it), `require`, `verify-ca` or `verify-full`, as
///   libpq reads them (``TLSMode``);
/// - `postgres://USER@/DATABASE?host=/run/postgresql` over the unix socket in
///   that directory (`.s.PGSQL.PORT` in it, as libpq names it), without TLS.
///
/// `postgresql://` is accepted too; the user, password and database are
/// percent-decoded. A URL without a password takes `password` instead (from
/// `[database] password-file` or `PGPASSWORD`: ``ServerConfiguration/databasePassword(environment:)``). The database defaults to the user's name, as with libpq.
/// Any other query parameter is refused, so that a misspelt one is not ignored.
struct PostgresLocation: Sendable {
    enum Endpoint: Sendable, Equatable {
        case tcp(host: String, port: Int)
        /// The socket file's path.
        case socket(String)
    }

    /// libpq's sslmode values, with libpq's meanings: prefer and require
    /// encrypt without checking the certificate (Debian's clusters serve a
    /// self-signed one), verify-ca checks it against the system's CAs and
    /// verify-full its host name too.
    enum TLSMode: String, Sendable {
        case disable, prefer, require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    /// The query parameters read; any other is refused (and left out of messages: it may be libpq's password=).
    private static let parameters: Set<String> = ["host", "sslmode"]

    var endpoint: Endpoint
    var username: String
    var password: String?
    var database: String
    var tls: TLSMode
    /// The URL without its password, to name it in messages.
    var redacted: String

    init(url: String, password fallback: String? = nil) throws(DatabaseOpenError) {
        guard var components = URLComponents(string: url), components.scheme == "postgres" || components.scheme == "postgresql" else {
            throw DatabaseOpenError(message: "the database URL must start with postgres:// (postgres://user@host/database)")
        }
        password = components.password ?? fallback
        let items = components.queryItems ?? []
        components.password = nil
        let named = items.filter { Self.parameters.contains($0.name) }
        components.queryItems = named.isEmpty ? nil : named
        let redacted = components.string ?? "postgres://"
        self.redacted = redacted
        func refuse(_ why: String) -> DatabaseOpenError {
            DatabaseOpenError(message: "the database URL \(redacted) \(why)")
        }
        guard let user = components.user, !user.isEmpty else { throw refuse("names no user (postgres://user@host/database)") }
        username = user
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !path.contains("/") else { throw refuse("names a database with a '/'") }
        database = path.isEmpty ? user : path
        var socketDirectory: String?
        var tls = TLSMode.prefer
        for item in items {
            switch (item.name, item.value) {
            case ("host", let value?) where value.hasPrefix("/"):
                socketDirectory = value
            case ("sslmode", let value?):
                guard let mode = TLSMode(rawValue: value) else { throw refuse("has sslmode '\(value)': use disable, prefer, require, verify-ca or verify-full") }
                tls = mode
            default:
                throw refuse("has the parameter '\(item.name)': only host (a socket directory) and sslmode are read")
            }
        }
        self.tls = tls
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw refuse("has port \(port)") }
        if let socketDirectory {
            guard components.host?.isEmpty ?? true else { throw refuse("names both a host and a socket directory") }
            endpoint = .socket("\(socketDirectory)/.s.PGSQL.\(port)")
        } else {
            guard let host = components.host, !host.isEmpty else {
                throw refuse("names no host (postgres://user@host/database, or ?host=/socket/directory)")
            }
            endpoint = .tcp(host: host, port: port)
        }
    }

    /// For the one connection that migrates the schema at start.
    var connectionConfiguration: PostgresConnection.Configuration {
        get throws {
            switch endpoint {
            case .tcp(let host, let port):
                PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database,
                                                 tls: try connectionTLS)
            case .socket(let path):
                PostgresConnection.Configuration(unixSocketPath: path, username: username, password: password, database: database)
            }
        }
    }

    /// A failure to connect to the database or to migrate its schema, as
    /// operators are told it: the URL without its password, and what the
    /// server or the network said.
    func openError(_ error: any Error) -> DatabaseOpenError {
        DatabaseOpenError(message: "cannot open the database \(redacted): \(PostgresStorage.reason(error))")
    }

    /// For the pool that serves the storage's methods.
    var clientConfiguration: PostgresClient.Configuration {
        var configuration = switch endpoint {
        case .tcp(let host, let port):
            PostgresClient.Configuration(host: host, port: port, username: username, password: password, database: database,
                                         tls: clientTLS)
        case .socket(let path):
            PostgresClient.Configuration(unixSocketPath: path, username: username, password: password, database: database)
        }
        // Within the descriptors DescriptorBudget keeps for the database
        // (SQLite's pool takes 18); a connection per core and then some.
        configuration.options.maximumConnections = 8
        // A request gives up on a lock held this long, as SQLite's writers
        // give up after their busy timeout, instead of waiting with it.
        configuration.options.additionalStartupParameters = [("lock_timeout", "10s")]
        return configuration
    }

    private var connectionTLS: PostgresConnection.Configuration.TLS {
        get throws {
            switch tls {
            case .disable: .disable
            case .prefer: try .prefer(.init(configuration: tlsConfiguration))
            case .require, .verifyCA, .verifyFull: try .require(.init(configuration: tlsConfiguration))
            }
        }
    }

    private var clientTLS: PostgresClient.Configuration.TLS {
        switch tls {
        case .disable: .disable
        case .prefer: .prefer(tlsConfiguration)
        case .require, .verifyCA, .verifyFull: .require(tlsConfiguration)
        }
    }

    /// The TLS settings of a TCP connection (unused with disable).
    var tlsConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = switch tls {
        case .disable, .prefer, .require: .none
        case .verifyCA: .noHostnameVerification
        case .verifyFull: .fullVerification
        }
        return configuration
    }
}
