import Foundation

extension ServerConfiguration {
    /// Opens the database `[database]` names, migrated to this server's
    /// schema: the PostgreSQL database at `url`, or else the SQLite file at
    /// `path` (created, with its directory, when missing).
    public func openStorage() async throws -> any ServerStorage {
        if let databaseURL {
            return try await PostgresStorage(url: databaseURL, password: try databasePassword())
        }
        return try SQLiteStorage(path: databasePath)
    }

    /// The database as logs name it: the PostgreSQL URL without its password, or the SQLite file.
    public var databaseName: String {
        guard let databaseURL else { return databasePath }
        return (try? PostgresLocation(url: databaseURL).redacted) ?? "an invalid PostgreSQL URL"
    }
}
