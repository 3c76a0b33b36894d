import Foundation
import Logging
import NearbyCore
import NIOCore
import PostgresNIO

/// ``ServerStorage`` in a PostgreSQL database, which several server processes
/// (and the CLI) may share. A `PostgresClient` pool serves the methods; the
/// storage runs it in a task of its own. The schema is migrated at start
/// (PostgresSchema.swift). The beacon registry's part is in
/// PostgresBeaconStorage.swift, the connection server's in
/// Connection/PostgresConnectionStorage.swift.
///
/// Concurrency: transactions run in READ COMMITTED, PostgreSQL's default. A
/// method that counts or checks before it writes (a project's devices, a
/// device's publications, subscriptions, upstream and downstream messages, a
/// project's receipts) first locks the row that owns what it counts with
/// `SELECT … FOR NO KEY UPDATE`: writers of the same device or project take
/// turns on that one row, so the count holds until commit, and writers of
/// different ones never wait for each other. Row locks rather than
/// SERIALIZABLE, because they need no retry loop and conflict only where the
/// limits do. NO KEY UPDATE rather than UPDATE: inserting a row that
/// references the locked one (a token of that device) takes a KEY SHARE lock,
/// which NO KEY UPDATE does not block. Reads of more than one statement run on
/// one snapshot (REPEATABLE READ, read only), as SQLite's readers do.
public final class PostgresStorage: ServerStorage {
    let client: PostgresClient
    let logger: Logger
    /// Where the database is: the replica bus opens its own connection there.
    let location: PostgresLocation
    private let running: Task<Void, Never>

    /// Connects to the database at `url` (``PostgresLocation`` says which URLs
    /// are read; `password` is used when the URL has none), migrates its
    /// schema, and starts the pool. Throws ``DatabaseOpenError`` naming the
    /// URL without its password.
    public init(url: String, password: String? = nil) async throws {
        let location = try PostgresLocation(url: url, password: password)
        let logger = Logger(label: "nearby-server.postgres")
        do {
            // One connection of its own, so that a wrong URL or password is
            // told now, in the server's words, not retried by the pool.
            let connection = try await PostgresConnection.connect(configuration: try location.connectionConfiguration, id: 0,
                                                                  logger: logger)
            do {
                try await PostgresSchema.migrate(connection, logger: logger)
            } catch {
                try? await connection.close()
                throw error
            }
            try await connection.close()
        } catch {
            throw location.openError(error)
        }
        self.logger = logger
        self.location = location
        let client = PostgresClient(configuration: location.clientConfiguration)
        self.client = client
        running = Task { await client.run() }
    }

    deinit {
        running.cancel()
    }

    /// Closes the pool's connections and waits until they are closed.
    public func close() async {
        running.cancel()
        await running.value
    }

    /// PostgresNIO's errors describe themselves only as "Database error" (so
    /// as not to leak data into logs); this is what the server or the network said.
    static func reason(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] { return message }
        if let underlying = error.underlying { return "\(underlying)" }
        return "\(error.code)"
    }

    /// The SQLSTATE of a failed statement (23505: a unique violation, 23503: a foreign key's).
    static func sqlState(_ error: any Error) -> String? {
        (error as? PostgresFailure)?.sqlState ?? (error as? PSQLError)?.serverInfo?[.sqlState]
    }

    /// A serialization failure or a deadlock: PostgreSQL rolled the
    /// transaction back, and running it again may well succeed.
    private static func isTransient(_ error: any Error) -> Bool {
        ["40001", "40P01"].contains(sqlState(error))
    }

    /// How many times a transaction is tried when it fails transiently.
    private static let attempts = 3

    // MARK: Transactions

    /// Runs `body` as one read-write transaction (READ COMMITTED, whatever
    /// the database's default: see the type's comment).
    func write<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await transaction("BEGIN ISOLATION LEVEL READ COMMITTED", body)
    }

    /// Runs `body`'s queries on one snapshot.
    func read<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    /// Runs `body` in a transaction begun by `begin`, again (up to
    /// ``attempts`` in all) when PostgreSQL rolls it back for a deadlock or a
    /// serialization failure; a statement's failure comes out as a
    /// ``PostgresFailure``.
    private func transaction<T: Sendable>(_ begin: PostgresQuery, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await attemptTransaction(begin, body)
            } catch where attempt < Self.attempts && Self.isTransient(error) {
                attempt += 1
            } catch let error as PSQLError {
                throw PostgresFailure(error)
            }
        }
    }

    private func attemptTransaction<T: Sendable>(_ begin: PostgresQuery, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection { connection in
            try await connection.query(begin, logger: logger)
            do {
                let result = try await body(connection)
                try await connection.query("COMMIT", logger: logger)
                return result
            } catch {
                // On a broken connection the server has rolled back already.
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    /// The last value of the query's one column (nil without rows), every row read.
    func value<T: PostgresDecodable & Sendable>(_ type: T.Type, _ query: PostgresQuery, on connection: PostgresConnection) async throws -> T? {
        var value: T?
        for try await row in try await connection.query(query, logger: logger).decode(T.self) { value = row }
        return value
    }

    /// Runs a statement whose rows, if any, do not matter.
    func execute(_ query: PostgresQuery, on connection: PostgresConnection) async throws {
        try await connection.query(query, logger: logger)
    }

    /// How many rows the query returned (a DELETE or UPDATE … RETURNING 1: how many it changed).
    func count(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> Int {
        var count = 0
        for try await _ in try await connection.query(query, logger: logger) { count += 1 }
        return count
    }

    /// Locks the device's row until commit (see the type's comment); says
    /// whether there is one.
    @discardableResult
    func lock(device: String, on connection: PostgresConnection) async throws -> Bool {
        try await count("SELECT 1 FROM device WHERE id = \(device) FOR NO KEY UPDATE", on: connection) > 0
    }

    /// Locks the project's row until commit; says whether there is one.
    @discardableResult
    func lock(project: String, on connection: PostgresConnection) async throws -> Bool {
        try await count("SELECT 1 FROM project WHERE name = \(project) FOR NO KEY UPDATE", on: connection) > 0
    }

    /// ``lock(device:on:)``; throws ``StorageError/deviceNotFound(_:)`` when there is none.
    func lockDevice(_ device: String, on connection: PostgresConnection) async throws {
        guard try await lock(device: device, on: connection) else { throw StorageError.deviceNotFound(device) }
    }

    /// ``lock(project:on:)``; throws ``StorageError/projectNotFound(_:)`` when there is none.
    func lockProject(_ project: String, on connection: PostgresConnection) async throws {
        guard try await lock(project: project, on: connection) else { throw StorageError.projectNotFound(project) }
    }

    // MARK: Projects

    public func createProject(_ project: ProjectRecord, apiKeyHash: Data, adminKeyHash: Data, serverKeyHash: Data) async throws {
        let createdAt = Int64(clamping: project.createdAtMs)
        do {
            try await write { connection in
                let taken = try await value(Bool.self, """
                    SELECT EXISTS (SELECT 1 FROM project WHERE name = \(project.name) OR namespace = \(project.namespace))
                    """, on: connection) ?? false
                guard !taken else { throw StorageError.duplicateProject(project.name) }
                try await connection.query("""
                    INSERT INTO project (name, namespace, createdAtMs) VALUES (\(project.name), \(project.namespace), \(createdAt))
                    """, logger: logger)
                try await connection.query("INSERT INTO apiKey (hash, project, createdAtMs) VALUES (\(apiKeyHash), \(project.name), \(createdAt))",
                                           logger: logger)
                try await connection.query("""
                    INSERT INTO adminKey (project, hash, createdAtMs) VALUES (\(project.name), \(adminKeyHash), \(createdAt))
                    """, logger: logger)
                try await connection.query("""
                    INSERT INTO serverKey (project, hash, createdAtMs) VALUES (\(project.name), \(serverKeyHash), \(createdAt))
                    """, logger: logger)
                try await connection.query("INSERT INTO namespace (name, project) VALUES (\(project.namespace), \(project.name))",
                                           logger: logger)
            }
        } catch where Self.sqlState(error) == "23505" {
            // Another process created the same name or namespace after the check.
            throw StorageError.duplicateProject(project.name)
        }
    }

    public func ping() async throws {
        do {
            try await client.withConnection { connection in _ = try await connection.query("SELECT 1", logger: logger) }
        } catch let error as PSQLError {
            throw PostgresFailure(error)
        }
    }

    public func projects() async throws -> [ProjectSummary] {
        try await read { connection in
            var projects: [ProjectSummary] = []
            // Names in byte order, as SQLite sorts them, whatever the database's collation.
            for try await (name, namespace, createdAt, devices) in try await connection.query("""
                SELECT p.name, p.namespace, p.createdAtMs, (SELECT COUNT(*) FROM device d WHERE d.project = p.name)
                FROM project p ORDER BY p.name COLLATE "C"
                """, logger: logger).decode((String, String, Int64, Int64).self) {
                projects.append(ProjectSummary(project: ProjectRecord(name: name, namespace: namespace, createdAtMs: milliseconds(createdAt)),
                                               deviceCount: Int(devices)))
            }
            return projects
        }
    }

    public func deleteProject(name: String) async throws -> Bool {
        try await write { connection in
            try await count("DELETE FROM project WHERE name = \(name) RETURNING 1", on: connection) > 0
        }
    }

    public func project(apiKeyHash: Data) async throws -> ProjectRecord? {
        try await project("""
            SELECT p.name, p.namespace, p.createdAtMs FROM apiKey k JOIN project p ON p.name = k.project WHERE k.hash = \(apiKeyHash)
            """)
    }

    public func project(adminKeyHash: Data) async throws -> ProjectRecord? {
        try await project("""
            SELECT p.name, p.namespace, p.createdAtMs FROM adminKey k JOIN project p ON p.name = k.project WHERE k.hash = \(adminKeyHash)
            """)
    }

    public func project(name: String) async throws -> ProjectRecord? {
        try await project("SELECT name, namespace, createdAtMs FROM project WHERE name = \(name)")
    }

    /// The project the query's name, namespace and creation time describe.
    private func project(_ query: PostgresQuery) async throws -> ProjectRecord? {
        try await read { connection in
            var found: ProjectRecord?
            for try await (name, namespace, createdAt) in try await connection.query(query, logger: logger)
                .decode((String, String, Int64).self) {
                found = ProjectRecord(name: name, namespace: namespace, createdAtMs: milliseconds(createdAt))
            }
            return found
        }
    }

    public func replaceAdminKey(project: String, adminKeyHash: Data, createdAtMs: UInt64) async throws {
        try await write { connection in
            try await lockProject(project, on: connection)
            try await connection.query("""
                INSERT INTO adminKey (project, hash, createdAtMs) VALUES (\(project), \(adminKeyHash), \(Int64(clamping: createdAtMs)))
                ON CONFLICT (project) DO UPDATE SET hash = EXCLUDED.hash, createdAtMs = EXCLUDED.createdAtMs
                """, logger: logger)
        }
    }

    public func projectDeletions(after position: Int64) async throws -> ProjectDeletions {
        try await read { connection in
            var deletions = ProjectDeletions(position: position, projects: [])
            for try await (at, project) in try await connection.query("""
                SELECT position, project FROM projectDeletion WHERE position > \(position) ORDER BY position
                """, logger: logger).decode((Int64, String).self) {
                deletions.position = at
                deletions.projects.insert(project)
            }
            return deletions
        }
    }

    // MARK: Devices

    public func createDevice(_ device: DeviceRecord, secretHash: Data, limit: Int) async throws -> Bool {
        let createdAt = Int64(clamping: device.createdAtMs)
        return try await write { connection in
            // Registrations of the project take turns here, so that two at
            // once cannot both see room for one more.
            try await lockProject(device.project, on: connection)
            let count = try await value(Int.self, "SELECT COUNT(*) FROM device WHERE project = \(device.project)", on: connection) ?? 0
            guard count < limit else { return false }
            try await connection.query("""
                INSERT INTO device (id, project, secretHash, createdAtMs, lastSeenAtMs)
                VALUES (\(device.id), \(device.project), \(secretHash), \(createdAt), \(createdAt))
                """, logger: logger)
            return true
        }
    }

    public func device(secretHash: Data) async throws -> DeviceRecord? {
        try await devices("\(unescaped: Self.deviceQuery) WHERE d.secretHash = \(secretHash)").first
    }

    public func devices() async throws -> [DeviceRecord] {
        try await devices("\(unescaped: Self.deviceQuery)")
    }

    public func deviceIDs(projects: Set<String>) async throws -> Set<String> {
        try await read { connection in
            var ids = Set<String>()
            for try await id in try await connection.query("SELECT id FROM device WHERE project = ANY(\(Array(projects)))", logger: logger)
                .decode(String.self) {
                ids.insert(id)
            }
            return ids
        }
    }

    public func deleteDevice(id: String) async throws -> Bool {
        try await write { connection in
            // The project first, as deleteProject locks it before its devices:
            // the deletion's trigger logs it with a reference to the project,
            // which would otherwise lock device then project and deadlock
            // with a deletion of the project.
            try await execute("SELECT 1 FROM project WHERE name = (SELECT project FROM device WHERE id = \(id)) FOR KEY SHARE",
                              on: connection)
            return try await count("DELETE FROM device WHERE id = \(id) RETURNING 1", on: connection) > 0
        }
    }

    public func touchDevice(id: String, atMs: UInt64) async throws {
        try await write { connection in
            try await execute("UPDATE device SET lastSeenAtMs = \(Int64(clamping: atMs)) WHERE id = \(id)", on: connection)
        }
    }

    public func deviceActivity(project: String) async throws -> [DeviceActivity] {
        try await read { connection in
            var activity: [DeviceActivity] = []
            for try await (id, createdAt, lastSeenAt) in try await connection.query("""
                SELECT id, createdAtMs, lastSeenAtMs FROM device WHERE project = \(project) ORDER BY id COLLATE "C"
                """, logger: logger).decode((String, Int64, Int64).self) {
                activity.append(DeviceActivity(device: id, createdAtMs: milliseconds(createdAt), lastSeenAtMs: milliseconds(lastSeenAt)))
            }
            return activity
        }
    }

    public func staleDevices(lastSeenBeforeMs: UInt64, limit: Int) async throws -> [DeviceRecord] {
        try await devices("""
            \(unescaped: Self.deviceQuery) WHERE d.lastSeenAtMs < \(Int64(clamping: lastSeenBeforeMs)) ORDER BY d.lastSeenAtMs LIMIT \(limit)
            """)
    }

    public func deviceDeletions(after position: Int64) async throws -> DeviceDeletions {
        try await read { connection in
            var deletions = DeviceDeletions(position: position, devices: [:])
            for try await (at, device, project) in try await connection.query("""
                SELECT position, device, project FROM deviceDeletion WHERE position > \(position) ORDER BY position
                """, logger: logger).decode((Int64, String, String).self) {
                deletions.position = at
                deletions.devices[device] = project
            }
            return deletions
        }
    }

    public func purgeDeletedDevices(deletedBeforeMs: UInt64) async throws -> Int {
        try await write { connection in
            try await count("DELETE FROM deletedDevice WHERE deletedAtMs < \(Int64(clamping: deletedBeforeMs)) RETURNING 1", on: connection)
        }
    }

    private static let deviceQuery = "SELECT d.id, d.project, p.namespace, d.createdAtMs FROM device d JOIN project p ON p.name = d.project"

    /// The devices a query of ``deviceQuery`` finds.
    private func devices(_ query: PostgresQuery) async throws -> [DeviceRecord] {
        try await read { connection in
            var devices: [DeviceRecord] = []
            for try await (id, project, namespace, createdAt) in try await connection.query(query, logger: logger)
                .decode((String, String, String, Int64).self) {
                devices.append(DeviceRecord(id: id, project: project, namespace: namespace, createdAtMs: milliseconds(createdAt)))
            }
            return devices
        }
    }

    // MARK: Tokens

    public func insertToken(_ token: TokenRecord) async throws -> Bool {
        do {
            return try await write { connection in
                guard try await value(Bool.self, "SELECT EXISTS (SELECT 1 FROM device WHERE id = \(token.device))", on: connection) ?? false else {
                    throw StorageError.deviceNotFound(token.device)
                }
                return try await count("""
                    INSERT INTO token (token, device, issuedAtMs, expiresAtMs)
                    VALUES (\(Data(token.token.bytes)), \(token.device), \(Int64(clamping: token.issuedAtMs)), \(Int64(clamping: token.expiresAtMs)))
                    ON CONFLICT (token) DO NOTHING RETURNING 1
                    """, on: connection) > 0
            }
        } catch where Self.sqlState(error) == "23503" {
            // The device was deleted after the check.
            throw StorageError.deviceNotFound(token.device)
        }
    }

    public func tokens(_ tokens: [Token]) async throws -> [Token: TokenRecord] {
        guard !tokens.isEmpty else { return [:] }
        let wanted = Set(tokens).map { ByteBuffer(bytes: $0.bytes) }
        return try await self.tokens("SELECT token, device, issuedAtMs, expiresAtMs FROM token WHERE token = ANY(\(wanted))")
            .reduce(into: [:]) { found, record in found[record.token] = record }
    }

    public func liveTokens(nowMs: UInt64) async throws -> [TokenRecord] {
        try await tokens("SELECT token, device, issuedAtMs, expiresAtMs FROM token WHERE expiresAtMs > \(Int64(clamping: nowMs))")
    }

    public func purgeTokens(expiredBeforeMs: UInt64) async throws {
        try await write { connection in
            try await execute("DELETE FROM token WHERE expiresAtMs <= \(Int64(clamping: expiredBeforeMs))", on: connection)
        }
    }

    /// The tokens a query of their four columns finds.
    private func tokens(_ query: PostgresQuery) async throws -> [TokenRecord] {
        try await read { connection in
            var records: [TokenRecord] = []
            for try await (bytes, device, issuedAt, expiresAt) in try await connection.query(query, logger: logger)
                .decode((Data, String, Int64, Int64).self) {
                guard let token = Token(bytes: Array(bytes)) else { throw CorruptRow("token of \(bytes.count) bytes") }
                records.append(TokenRecord(token: token, device: device, issuedAtMs: milliseconds(issuedAt),
                                           expiresAtMs: milliseconds(expiresAt)))
            }
            return records
        }
    }

    // MARK: Publications and subscriptions

    public func applyChanges(_ changes: [ObjectChange], device: String, limits: ObjectLimits) async throws -> [ChangeOutcome] {
        try await write { connection in
            // The device's changes take turns here: its counts hold until commit.
            try await lockDevice(device, on: connection)
            var publications = PostgresDeviceRows(table: "publication", device: device, limit: limits.publications)
            var subscriptions = PostgresDeviceRows(table: "subscription", device: device, limit: limits.subscriptions)
            var outcomes: [ChangeOutcome] = []
            for change in changes {
                switch change {
                case .putPublication(let publication):
                    outcomes.append(try await publications.put(publication.id, self, connection) {
                        try await connection.query("""
                            INSERT INTO publication (device, id, namespace, type, content, mediums, mode, expiresAtMs, distance)
                            VALUES (\(device), \(publication.id), \(publication.namespace), \(publication.type), \(publication.content),
                                    \(StoredColumns.text(publication.mediums)), \(publication.mode.rawValue),
                                    \(Int64(clamping: publication.expiresAtMs)), \(publication.distance.rawValue))
                            ON CONFLICT (device, id) DO UPDATE SET namespace = EXCLUDED.namespace, type = EXCLUDED.type,
                                content = EXCLUDED.content, mediums = EXCLUDED.mediums, mode = EXCLUDED.mode,
                                expiresAtMs = EXCLUDED.expiresAtMs, distance = EXCLUDED.distance
                            """, logger: logger)
                    })
                case .deletePublication(let id):
                    outcomes.append(try await publications.delete(id, self, connection))
                case .putSubscription(let subscription):
                    outcomes.append(try await subscriptions.put(subscription.id, self, connection) {
                        try await connection.query("""
                            INSERT INTO subscription (device, id, namespace, type, mediums, mode, expiresAtMs, distance)
                            VALUES (\(device), \(subscription.id), \(subscription.namespace), \(subscription.type),
                                    \(StoredColumns.text(subscription.mediums)), \(subscription.mode.rawValue),
                                    \(Int64(clamping: subscription.expiresAtMs)), \(subscription.distance.rawValue))
                            ON CONFLICT (device, id) DO UPDATE SET namespace = EXCLUDED.namespace, type = EXCLUDED.type,
                                mediums = EXCLUDED.mediums, mode = EXCLUDED.mode, expiresAtMs = EXCLUDED.expiresAtMs,
                                distance = EXCLUDED.distance
                            """, logger: logger)
                    })
                case .deleteSubscription(let id):
                    outcomes.append(try await subscriptions.delete(id, self, connection))
                }
            }
            return outcomes
        }
    }

    public func publications(device: String?) async throws -> [StoredPublication] {
        let columns = "device, id, namespace, type, content, mediums, mode, expiresAtMs, distance"
        let query: PostgresQuery = if let device {
            "SELECT \(unescaped: columns) FROM publication WHERE device = \(device) ORDER BY id COLLATE \"C\""
        } else {
            "SELECT \(unescaped: columns) FROM publication"
        }
        return try await read { connection in
            var publications: [StoredPublication] = []
            for try await (device, id, namespace, type, content, mediums, mode, expiresAt, distance) in try await connection
                .query(query, logger: logger).decode((String, String, String, String, Data, String, String, Int64, String).self) {
                publications.append(StoredPublication(device: device, id: id, namespace: namespace, type: type, content: content,
                                                      mediums: try StoredColumns.mediums(mediums), mode: try StoredColumns.mode(mode),
                                                      expiresAtMs: milliseconds(expiresAt), distance: try StoredColumns.distance(distance)))
            }
            return publications
        }
    }

    public func publicationContent(device: String, id: String) async throws -> Data? {
        try await read { connection in
            try await value(Data.self, "SELECT content FROM publication WHERE device = \(device) AND id = \(id)", on: connection)
        }
    }

    public func deleteExpiredPublications(nowMs: UInt64) async throws {
        try await write { connection in
            try await execute("DELETE FROM publication WHERE expiresAtMs <= \(Int64(clamping: nowMs))", on: connection)
        }
    }

    public func subscriptions(device: String?) async throws -> [StoredSubscription] {
        let columns = "device, id, namespace, type, mediums, mode, expiresAtMs, distance"
        let query: PostgresQuery = if let device {
            "SELECT \(unescaped: columns) FROM subscription WHERE device = \(device) ORDER BY id COLLATE \"C\""
        } else {
            "SELECT \(unescaped: columns) FROM subscription"
        }
        return try await read { connection in
            var subscriptions: [StoredSubscription] = []
            for try await (device, id, namespace, type, mediums, mode, expiresAt, distance) in try await connection
                .query(query, logger: logger).decode((String, String, String, String, String, String, Int64, String).self) {
                subscriptions.append(StoredSubscription(device: device, id: id, namespace: namespace, type: type,
                                                        mediums: try StoredColumns.mediums(mediums), mode: try StoredColumns.mode(mode),
                                                        expiresAtMs: milliseconds(expiresAt), distance: try StoredColumns.distance(distance)))
            }
            return subscriptions
        }
    }

    public func deleteExpiredSubscriptions(nowMs: UInt64) async throws {
        try await write { connection in
            try await execute("DELETE FROM subscription WHERE expiresAtMs != 0 AND expiresAtMs <= \(Int64(clamping: nowMs))",
                                       on: connection)
        }
    }
}

/// One device's rows of one table while a batch of changes is written, as
/// SQLite's DeviceRows: counted once, at the first new id.
private struct PostgresDeviceRows {
    /// publication or subscription: a constant, never outside input.
    let table: String
    let device: String
    let limit: Int
    private var count: Int?

    init(table: String, device: String, limit: Int) {
        self.table = table
        self.device = device
        self.limit = limit
    }

    /// Runs `write` (an upsert of `id`) unless `id` is new and the device is at its limit.
    mutating func put(_ id: String, _ storage: PostgresStorage, _ connection: PostgresConnection,
                      write: () async throws -> Void) async throws -> ChangeOutcome {
        if try await storage.count("SELECT 1 FROM \(unescaped: table) WHERE device = \(device) AND id = \(id)", on: connection) > 0 {
            try await write()
            return .replaced
        }
        let current: Int
        if let count {
            current = count
        } else {
            current = try await storage.value(Int.self, "SELECT COUNT(*) FROM \(unescaped: table) WHERE device = \(device)",
                                              on: connection) ?? 0
        }
        count = current
        guard current < limit else { return .limitReached }
        try await write()
        count = current + 1
        return .created
    }

    mutating func delete(_ id: String, _ storage: PostgresStorage, _ connection: PostgresConnection) async throws -> ChangeOutcome {
        guard try await storage.count("DELETE FROM \(unescaped: table) WHERE device = \(device) AND id = \(id) RETURNING 1",
                                      on: connection) > 0 else { return .absent }
        count = count.map { $0 - 1 }
        return .deleted
    }
}

/// A statement PostgreSQL refused, in the words the server used: PSQLError
/// describes itself only generically (so that no bound value reaches a log),
/// which left the server's logs saying nothing. The server's message names
/// constraints and types; a value only where one failed to parse as its type.
struct PostgresFailure: Error, CustomStringConvertible {
    let sqlState: String?
    let description: String

    init(_ error: PSQLError) {
        sqlState = error.serverInfo?[.sqlState]
        description = "PostgreSQL: \(PostgresStorage.reason(error))" + (sqlState.map { " (SQLSTATE \($0))" } ?? "")
    }
}
