import Foundation
import GRDB
import NearbyCore

/// ``ServerStorage`` in one SQLite file: a GRDB `DatabasePool` in WAL mode
/// (readers never wait for the writer) with every commit synced to disk, foreign keys on, so deleting a project
/// or device takes everything it owns with it. Several processes may open the
/// same file: `nearby-server project create` while the server runs. The
/// beacon registry's part is in SQLiteBeaconStorage.swift.
public final class SQLiteStorage: ServerStorage {
    let pool: DatabasePool

    /// Opens (creating when missing, with its directory) and migrates the database at `path`.
    public init(path: String) throws {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw DatabaseOpenError(message: "cannot create the database directory \(directory): \(Self.reason(error))")
        }
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        // Another process (the CLI) may hold the write lock for a moment.
        configuration.busyMode = .timeout(10)
        configuration.label = "nearby-server"
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            // GRDB's pool sets NORMAL, under which a commit may be lost to a
            // power failure or a crash of the system: what the server
            // acknowledges (a device's message, a downstream message) must
            // survive both, so every commit waits for its fsync. The
            // connection server's writes are grouped, one commit for many.
            try pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA synchronous = FULL") }
            try Self.migrator.migrate(pool)
        } catch {
            throw DatabaseOpenError(message: "cannot open the database \(path): \(error)")
        }
    }

    /// Foundation's file errors, as the one-line POSIX reason when there is one.
    private static func reason(_ error: any Error) -> String {
        if let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? any Error,
           (underlying as NSError).domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32((underlying as NSError).code)))
        }
        return (error as NSError).localizedDescription
    }

    /// The schema's migrations, in order; `nearby-server migrate` requires all of them applied.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE project (
                    name TEXT PRIMARY KEY NOT NULL,
                    namespace TEXT NOT NULL UNIQUE,
                    createdAtMs INTEGER NOT NULL
                );
                CREATE TABLE apiKey (
                    hash BLOB PRIMARY KEY NOT NULL,
                    project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    createdAtMs INTEGER NOT NULL
                );
                CREATE INDEX apiKey_project ON apiKey(project);
                CREATE TABLE device (
                    id TEXT PRIMARY KEY NOT NULL,
                    project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    secretHash BLOB NOT NULL UNIQUE,
                    createdAtMs INTEGER NOT NULL
                );
                CREATE INDEX device_project ON device(project);
                CREATE TABLE token (
                    token BLOB PRIMARY KEY NOT NULL,
                    device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                    issuedAtMs INTEGER NOT NULL,
                    expiresAtMs INTEGER NOT NULL
                );
                CREATE INDEX token_device ON token(device);
                CREATE INDEX token_expiresAtMs ON token(expiresAtMs);
                CREATE TABLE publication (
                    device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                    id TEXT NOT NULL,
                    namespace TEXT NOT NULL,
                    type TEXT NOT NULL,
                    content BLOB NOT NULL,
                    mediums TEXT NOT NULL,
                    mode TEXT NOT NULL,
                    expiresAtMs INTEGER NOT NULL,
                    PRIMARY KEY (device, id)
                );
                CREATE INDEX publication_expiresAtMs ON publication(expiresAtMs);
                CREATE TABLE subscription (
                    device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                    id TEXT NOT NULL,
                    namespace TEXT NOT NULL,
                    type TEXT NOT NULL,
                    mediums TEXT NOT NULL,
                    mode TEXT NOT NULL,
                    expiresAtMs INTEGER NOT NULL,
                    PRIMARY KEY (device, id)
                );
                CREATE INDEX subscription_expiresAtMs ON subscription(expiresAtMs);
                """)
        }
        // A running server learns of projects deleted by another process
        // (the CLI) from this log: by name alone it would miss a project
        // deleted and created again between two of its sweeps.
        migrator.registerMigration("v2") { db in
            try db.execute(sql: """
                CREATE TABLE projectDeletion (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    project TEXT NOT NULL
                );
                CREATE TRIGGER project_deleted AFTER DELETE ON project BEGIN
                    INSERT INTO projectDeletion (project) VALUES (OLD.name);
                END;
                """)
        }
        // Earshot publications and subscriptions (audio within 1.5 m).
        migrator.registerMigration("v3") { db in
            try db.execute(sql: """
                ALTER TABLE publication ADD COLUMN distance TEXT NOT NULL DEFAULT 'default';
                ALTER TABLE subscription ADD COLUMN distance TEXT NOT NULL DEFAULT 'default';
                """)
        }
        // The beacon registry. One admin key per project; projects made before
        // it get theirs from `nearby-server project admin-key`. Beacons and
        // attachments are numbered by `position`, which orders listings.
        // A decommissioned id goes into retiredBeacon, which nothing deletes
        // from, so that it is never registered again.
        migrator.registerMigration("v4") { db in
            try db.execute(sql: """
                CREATE TABLE adminKey (
                    project TEXT PRIMARY KEY NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    hash BLOB NOT NULL UNIQUE,
                    createdAtMs INTEGER NOT NULL
                );
                CREATE TABLE namespace (
                    name TEXT PRIMARY KEY NOT NULL,
                    project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    servingVisibility TEXT NOT NULL DEFAULT 'UNLISTED'
                );
                CREATE INDEX namespace_project ON namespace(project);
                INSERT INTO namespace (name, project) SELECT namespace, name FROM project;
                CREATE TABLE beacon (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    type TEXT NOT NULL,
                    id BLOB NOT NULL,
                    project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    status TEXT NOT NULL,
                    description TEXT,
                    properties TEXT NOT NULL,
                    expectedStability TEXT,
                    indoorLevel TEXT,
                    latitude REAL,
                    longitude REAL,
                    placeId TEXT,
                    createdAtMs INTEGER NOT NULL,
                    lastTelemetry BLOB,
                    lastTelemetryAtMs INTEGER,
                    UNIQUE (type, id)
                );
                CREATE INDEX beacon_project ON beacon(project, position);
                CREATE TABLE retiredBeacon (
                    type TEXT NOT NULL,
                    id BLOB NOT NULL,
                    retiredAtMs INTEGER NOT NULL,
                    PRIMARY KEY (type, id)
                );
                CREATE TABLE attachment (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    beacon INTEGER NOT NULL REFERENCES beacon(position) ON DELETE CASCADE,
                    id TEXT NOT NULL,
                    namespace TEXT NOT NULL REFERENCES namespace(name) ON DELETE CASCADE,
                    type TEXT NOT NULL,
                    data BLOB NOT NULL,
                    createdAtMs INTEGER NOT NULL,
                    UNIQUE (beacon, id)
                );
                CREATE INDEX attachment_beacon_namespace ON attachment(beacon, namespace);
                CREATE INDEX attachment_namespace ON attachment(namespace);
                """)
        }
        // The connection server (Connection/): one server key per project for
        // its application servers; devices' upstream messages, kept with their
        // verdict until they expire so that a repeat is answered, not delivered
        // again; downstream messages until the device has them; receipts until
        // an application server has them. A deleted device's id is remembered
        // so that application servers hear DEVICE_UNREGISTERED, not BAD_REGISTRATION.
        migrator.registerMigration("v5") { db in
            try db.execute(sql: """
                CREATE TABLE serverKey (
                    project TEXT PRIMARY KEY NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    hash BLOB NOT NULL UNIQUE,
                    createdAtMs INTEGER NOT NULL
                );
                CREATE TABLE upstream (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    project TEXT NOT NULL,
                    device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                    app TEXT NOT NULL,
                    messageId TEXT NOT NULL,
                    data TEXT NOT NULL,
                    receivedAtMs INTEGER NOT NULL,
                    expiresAtMs INTEGER NOT NULL,
                    verdict TEXT,
                    verdictDescription TEXT,
                    settledAtMs INTEGER,
                    UNIQUE (device, app, messageId)
                );
                CREATE INDEX upstream_pending ON upstream(project, position) WHERE verdict IS NULL;
                CREATE INDEX upstream_device_message ON upstream(device, messageId) WHERE verdict IS NULL;
                CREATE INDEX upstream_expiresAtMs ON upstream(expiresAtMs);
                CREATE TABLE downstream (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    project TEXT NOT NULL,
                    device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                    messageId TEXT NOT NULL,
                    data TEXT NOT NULL,
                    receivedAtMs INTEGER NOT NULL,
                    expiresAtMs INTEGER NOT NULL,
                    receiptRequested INTEGER NOT NULL
                );
                CREATE INDEX downstream_device ON downstream(device, position);
                CREATE INDEX downstream_expiresAtMs ON downstream(expiresAtMs);
                CREATE TABLE receipt (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                    messageId TEXT NOT NULL,
                    payload TEXT NOT NULL
                );
                CREATE INDEX receipt_project ON receipt(project, position);
                CREATE TABLE deletedDevice (
                    id TEXT PRIMARY KEY NOT NULL,
                    project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE
                );
                CREATE TRIGGER device_deleted AFTER DELETE ON device BEGIN
                    INSERT OR IGNORE INTO deletedDevice (id, project)
                        SELECT OLD.id, OLD.project WHERE EXISTS (SELECT 1 FROM project WHERE name = OLD.project);
                END;
                """)
        }
        // When each device last authenticated, so that devices nobody uses
        // any more expire; and a log of device deletions, from which a running
        // server learns of devices the CLI removed (it keeps a day, by
        // SQLite's clock, which alone writes and purges it).
        migrator.registerMigration("v6") { db in
            try db.execute(sql: """
                ALTER TABLE device ADD COLUMN lastSeenAtMs INTEGER NOT NULL DEFAULT 0;
                UPDATE device SET lastSeenAtMs = createdAtMs;
                CREATE INDEX device_lastSeenAtMs ON device(lastSeenAtMs);
                CREATE TABLE deviceDeletion (
                    position INTEGER PRIMARY KEY AUTOINCREMENT,
                    device TEXT NOT NULL,
                    project TEXT NOT NULL,
                    deletedAtMs INTEGER NOT NULL
                );
                CREATE TRIGGER device_deletion_logged AFTER DELETE ON device BEGIN
                    DELETE FROM deviceDeletion WHERE deletedAtMs < \(Self.sqliteNowMs) - 86400000;
                    INSERT INTO deviceDeletion (device, project, deletedAtMs) VALUES (OLD.id, OLD.project, \(Self.sqliteNowMs));
                END;
                """)
        }
        // When each device was deleted, so that the ids of deleted devices
        // (kept to answer `DEVICE_UNREGISTERED`) are forgotten after `[limits]
        // deleted-device-days` instead of piling up. By SQLite's clock, as
        // the log of v6: the CLI deletes devices too. Those deleted before
        // count from now.
        migrator.registerMigration("v7") { db in
            try db.execute(sql: """
                ALTER TABLE deletedDevice ADD COLUMN deletedAtMs INTEGER NOT NULL DEFAULT 0;
                UPDATE deletedDevice SET deletedAtMs = \(Self.sqliteNowMs);
                CREATE INDEX deletedDevice_deletedAtMs ON deletedDevice(deletedAtMs);
                DROP TRIGGER device_deleted;
                CREATE TRIGGER device_deleted AFTER DELETE ON device BEGIN
                    INSERT OR REPLACE INTO deletedDevice (id, project, deletedAtMs)
                        SELECT OLD.id, OLD.project, \(Self.sqliteNowMs) WHERE EXISTS (SELECT 1 FROM project WHERE name = OLD.project);
                END;
                """)
        }
        // The trigger of v6 drops log entries older than a day at each device
        // deleted: without an index it read the whole log each time.
        migrator.registerMigration("v8") { db in
            try db.execute(sql: "CREATE INDEX deviceDeletion_deletedAtMs ON deviceDeletion(deletedAtMs)")
        }
        // Which replica holds an upstream message or a receipt, and until
        // when (ConnectionHub): with several replicas, each goes to one
        // application-server session at a time. A claim lapses at its time
        // if its replica stops renewing it.
        migrator.registerMigration("v9") { db in
            try db.execute(sql: """
                ALTER TABLE upstream ADD COLUMN claimedBy TEXT;
                ALTER TABLE upstream ADD COLUMN claimedUntilMs INTEGER;
                ALTER TABLE receipt ADD COLUMN claimedBy TEXT;
                ALTER TABLE receipt ADD COLUMN claimedUntilMs INTEGER;
                CREATE INDEX upstream_claimedBy ON upstream(claimedBy) WHERE claimedBy IS NOT NULL;
                CREATE INDEX receipt_claimedBy ON receipt(claimedBy) WHERE claimedBy IS NOT NULL;
                """)
        }
        return migrator
    }

    // MARK: Projects

    public func createProject(_ project: ProjectRecord, apiKeyHash: Data, adminKeyHash: Data, serverKeyHash: Data) async throws {
        try await pool.write { db in
            let taken = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM project WHERE name = ? OR namespace = ?)",
                                          arguments: [project.name, project.namespace]) ?? false
            guard !taken else { throw StorageError.duplicateProject(project.name) }
            try db.execute(sql: "INSERT INTO project (name, namespace, createdAtMs) VALUES (?, ?, ?)",
                           arguments: [project.name, project.namespace, Int64(clamping: project.createdAtMs)])
            try db.execute(sql: "INSERT INTO apiKey (hash, project, createdAtMs) VALUES (?, ?, ?)",
                           arguments: [apiKeyHash, project.name, Int64(clamping: project.createdAtMs)])
            try db.execute(sql: "INSERT INTO adminKey (project, hash, createdAtMs) VALUES (?, ?, ?)",
                           arguments: [project.name, adminKeyHash, Int64(clamping: project.createdAtMs)])
            try db.execute(sql: "INSERT INTO serverKey (project, hash, createdAtMs) VALUES (?, ?, ?)",
                           arguments: [project.name, serverKeyHash, Int64(clamping: project.createdAtMs)])
            try db.execute(sql: "INSERT INTO namespace (name, project) VALUES (?, ?)", arguments: [project.namespace, project.name])
        }
    }

    public func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    public func projects() async throws -> [ProjectSummary] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT p.name, p.namespace, p.createdAtMs, (SELECT COUNT(*) FROM device d WHERE d.project = p.name) AS devices
                FROM project p ORDER BY p.name
                """).map { row in
                ProjectSummary(project: Self.project(row), deviceCount: row["devices"])
            }
        }
    }

    public func deleteProject(name: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM project WHERE name = ?", arguments: [name])
            return db.changesCount > 0
        }
    }

    public func project(apiKeyHash: Data) async throws -> ProjectRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: """
                SELECT p.name, p.namespace, p.createdAtMs FROM apiKey k JOIN project p ON p.name = k.project WHERE k.hash = ?
                """, arguments: [apiKeyHash]).map(Self.project)
        }
    }

    public func project(adminKeyHash: Data) async throws -> ProjectRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: """
                SELECT p.name, p.namespace, p.createdAtMs FROM adminKey k JOIN project p ON p.name = k.project WHERE k.hash = ?
                """, arguments: [adminKeyHash]).map(Self.project)
        }
    }

    public func project(name: String) async throws -> ProjectRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT name, namespace, createdAtMs FROM project WHERE name = ?", arguments: [name])
                .map(Self.project)
        }
    }

    public func replaceAdminKey(project: String, adminKeyHash: Data, createdAtMs: UInt64) async throws {
        try await pool.write { db in
            try Self.requireProject(project, db)
            try db.execute(sql: "INSERT OR REPLACE INTO adminKey (project, hash, createdAtMs) VALUES (?, ?, ?)",
                           arguments: [project, adminKeyHash, Int64(clamping: createdAtMs)])
        }
    }

    public func projectDeletions(after position: Int64) async throws -> ProjectDeletions {
        try await pool.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT position, project FROM projectDeletion WHERE position > ? ORDER BY position",
                                        arguments: [position])
            return ProjectDeletions(position: rows.last?["position"] ?? position, projects: Set(rows.map { $0["project"] }))
        }
    }

    private static func project(_ row: Row) -> ProjectRecord {
        ProjectRecord(name: row["name"], namespace: row["namespace"], createdAtMs: milliseconds(row["createdAtMs"]))
    }

    // MARK: Devices

    public func createDevice(_ device: DeviceRecord, secretHash: Data, limit: Int) async throws -> Bool {
        try await pool.write { db in
            try Self.requireProject(device.project, db)
            let count = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM device WHERE project = ?", arguments: [device.project]) ?? 0
            guard count < limit else { return false }
            try db.execute(sql: "INSERT INTO device (id, project, secretHash, createdAtMs, lastSeenAtMs) VALUES (?, ?, ?, ?, ?)",
                           arguments: [device.id, device.project, secretHash, Int64(clamping: device.createdAtMs),
                                       Int64(clamping: device.createdAtMs)])
            return true
        }
    }

    public func device(secretHash: Data) async throws -> DeviceRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "\(Self.deviceQuery) WHERE d.secretHash = ?", arguments: [secretHash]).map(Self.device)
        }
    }

    public func devices() async throws -> [DeviceRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: Self.deviceQuery).map(Self.device)
        }
    }

    public func deviceIDs(projects: Set<String>) async throws -> Set<String> {
        try await pool.read { db in
            var ids = Set<String>()
            for project in projects {
                ids.formUnion(try String.fetchAll(db, sql: "SELECT id FROM device WHERE project = ?", arguments: [project]))
            }
            return ids
        }
    }

    public func deleteDevice(id: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM device WHERE id = ?", arguments: [id])
            return db.changesCount > 0
        }
    }

    public func touchDevice(id: String, atMs: UInt64) async throws {
        try await pool.write { db in
            try db.execute(sql: "UPDATE device SET lastSeenAtMs = ? WHERE id = ?", arguments: [Int64(clamping: atMs), id])
        }
    }

    public func deviceActivity(project: String) async throws -> [DeviceActivity] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, createdAtMs, lastSeenAtMs FROM device WHERE project = ? ORDER BY id",
                             arguments: [project]).map { row in
                DeviceActivity(device: row["id"], createdAtMs: milliseconds(row["createdAtMs"]),
                               lastSeenAtMs: milliseconds(row["lastSeenAtMs"]))
            }
        }
    }

    public func staleDevices(lastSeenBeforeMs: UInt64, limit: Int) async throws -> [DeviceRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "\(Self.deviceQuery) WHERE d.lastSeenAtMs < ? ORDER BY d.lastSeenAtMs LIMIT ?",
                             arguments: [Int64(clamping: lastSeenBeforeMs), limit]).map(Self.device)
        }
    }

    public func deviceDeletions(after position: Int64) async throws -> DeviceDeletions {
        try await pool.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT position, device, project FROM deviceDeletion WHERE position > ? ORDER BY position",
                                        arguments: [position])
            var devices: [String: String] = [:]
            for row in rows { devices[row["device"]] = row["project"] }
            return DeviceDeletions(position: rows.last?["position"] ?? position, devices: devices)
        }
    }

    /// Now in milliseconds by SQLite's clock, for what only SQLite writes and reads.
    public func purgeDeletedDevices(deletedBeforeMs: UInt64) async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM deletedDevice WHERE deletedAtMs < ?", arguments: [Int64(clamping: deletedBeforeMs)])
            return db.changesCount
        }
    }

    private static let sqliteNowMs = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

    private static let deviceQuery = "SELECT d.id, d.project, p.namespace, d.createdAtMs FROM device d JOIN project p ON p.name = d.project"

    private static func device(_ row: Row) -> DeviceRecord {
        DeviceRecord(id: row["id"], project: row["project"], namespace: row["namespace"], createdAtMs: milliseconds(row["createdAtMs"]))
    }

    // MARK: Tokens

    public func insertToken(_ token: TokenRecord) async throws -> Bool {
        try await pool.write { db in
            try Self.requireDevice(token.device, db)
            try db.execute(sql: "INSERT OR IGNORE INTO token (token, device, issuedAtMs, expiresAtMs) VALUES (?, ?, ?, ?)",
                           arguments: [Data(token.token.bytes), token.device, Int64(clamping: token.issuedAtMs),
                                       Int64(clamping: token.expiresAtMs)])
            return db.changesCount > 0
        }
    }

    public func tokens(_ tokens: [Token]) async throws -> [Token: TokenRecord] {
        guard !tokens.isEmpty else { return [:] }
        let unique = Array(Set(tokens))
        return try await pool.read { db in
            var found: [Token: TokenRecord] = [:]
            // Stay well below SQLite's limit on bound parameters.
            for start in stride(from: 0, to: unique.count, by: 500) {
                let chunk = unique[start..<min(start + 500, unique.count)]
                let placeholders = Array(repeating: "?", count: chunk.count).joined(separator: ",")
                let rows = try Row.fetchAll(db, sql: "SELECT token, device, issuedAtMs, expiresAtMs FROM token WHERE token IN (\(placeholders))",
                                            arguments: StatementArguments(chunk.map { Data($0.bytes) }))
                for row in rows {
                    let record = try Self.token(row)
                    found[record.token] = record
                }
            }
            return found
        }
    }

    public func liveTokens(nowMs: UInt64) async throws -> [TokenRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT token, device, issuedAtMs, expiresAtMs FROM token WHERE expiresAtMs > ?",
                             arguments: [Int64(clamping: nowMs)]).map(Self.token)
        }
    }

    public func purgeTokens(expiredBeforeMs: UInt64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM token WHERE expiresAtMs <= ?", arguments: [Int64(clamping: expiredBeforeMs)])
        }
    }

    private static func token(_ row: Row) throws -> TokenRecord {
        let bytes: Data = row["token"]
        guard let token = Token(bytes: Array(bytes)) else { throw CorruptRow("token of \(bytes.count) bytes") }
        return TokenRecord(token: token, device: row["device"], issuedAtMs: milliseconds(row["issuedAtMs"]),
                           expiresAtMs: milliseconds(row["expiresAtMs"]))
    }

    // MARK: Publications and subscriptions

    public func applyChanges(_ changes: [ObjectChange], device: String, limits: ObjectLimits) async throws -> [ChangeOutcome] {
        try await pool.write { db in
            try Self.requireDevice(device, db)
            var publications = DeviceRows(table: "publication", device: device, limit: limits.publications)
            var subscriptions = DeviceRows(table: "subscription", device: device, limit: limits.subscriptions)
            return try changes.map { change in
                switch change {
                case .putPublication(let publication):
                    try publications.put(publication.id, db) {
                        try db.cachedStatement(sql: """
                            INSERT OR REPLACE INTO publication (device, id, namespace, type, content, mediums, mode, expiresAtMs,
                                                                distance)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """).execute(arguments: [device, publication.id, publication.namespace, publication.type,
                                                     publication.content, StoredColumns.text(publication.mediums),
                                                     publication.mode.rawValue, Int64(clamping: publication.expiresAtMs),
                                                     publication.distance.rawValue])
                    }
                case .deletePublication(let id):
                    try publications.delete(id, db)
                case .putSubscription(let subscription):
                    try subscriptions.put(subscription.id, db) {
                        try db.cachedStatement(sql: """
                            INSERT OR REPLACE INTO subscription (device, id, namespace, type, mediums, mode, expiresAtMs,
                                                                 distance)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                            """).execute(arguments: [device, subscription.id, subscription.namespace, subscription.type,
                                                     StoredColumns.text(subscription.mediums), subscription.mode.rawValue,
                                                     Int64(clamping: subscription.expiresAtMs), subscription.distance.rawValue])
                    }
                case .deleteSubscription(let id):
                    try subscriptions.delete(id, db)
                }
            }
        }
    }

    public func publications(device: String?) async throws -> [StoredPublication] {
        try await pool.read { db in
            let columns = "device, id, namespace, type, content, mediums, mode, expiresAtMs, distance"
            let rows = if let device {
                try Row.fetchAll(db, sql: "SELECT \(columns) FROM publication WHERE device = ? ORDER BY id", arguments: [device])
            } else {
                try Row.fetchAll(db, sql: "SELECT \(columns) FROM publication")
            }
            return try rows.map { row in
                StoredPublication(device: row["device"], id: row["id"], namespace: row["namespace"], type: row["type"],
                                  content: row["content"], mediums: try StoredColumns.mediums(row["mediums"]),
                                  mode: try StoredColumns.mode(row["mode"]), expiresAtMs: milliseconds(row["expiresAtMs"]),
                                  distance: try StoredColumns.distance(row["distance"]))
            }
        }
    }

    public func publicationContent(device: String, id: String) async throws -> Data? {
        try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT content FROM publication WHERE device = ? AND id = ?", arguments: [device, id])
        }
    }

    public func deleteExpiredPublications(nowMs: UInt64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM publication WHERE expiresAtMs <= ?", arguments: [Int64(clamping: nowMs)])
        }
    }

    public func subscriptions(device: String?) async throws -> [StoredSubscription] {
        try await pool.read { db in
            let columns = "device, id, namespace, type, mediums, mode, expiresAtMs, distance"
            let rows = if let device {
                try Row.fetchAll(db, sql: "SELECT \(columns) FROM subscription WHERE device = ? ORDER BY id", arguments: [device])
            } else {
                try Row.fetchAll(db, sql: "SELECT \(columns) FROM subscription")
            }
            return try rows.map { row in
                StoredSubscription(device: row["device"], id: row["id"], namespace: row["namespace"], type: row["type"],
                                   mediums: try StoredColumns.mediums(row["mediums"]), mode: try StoredColumns.mode(row["mode"]),
                                   expiresAtMs: milliseconds(row["expiresAtMs"]), distance: try StoredColumns.distance(row["distance"]))
            }
        }
    }

    public func deleteExpiredSubscriptions(nowMs: UInt64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM subscription WHERE expiresAtMs != 0 AND expiresAtMs <= ?",
                           arguments: [Int64(clamping: nowMs)])
        }
    }

    // MARK: Helpers

    static func requireProject(_ project: String, _ db: Database) throws {
        let exists = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM project WHERE name = ?)", arguments: [project]) ?? false
        guard exists else { throw StorageError.projectNotFound(project) }
    }

    private static func requireDevice(_ device: String, _ db: Database) throws {
        let exists = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM device WHERE id = ?)", arguments: [device]) ?? false
        guard exists else { throw StorageError.deviceNotFound(device) }
    }
}

/// One device's rows of one table while a batch of changes is written: the
/// limit check counts them once, at the first new id, and keeps the count
/// after that instead of counting again for every put.
private struct DeviceRows {
    let table: String
    let device: String
    let limit: Int
    private var count: Int?

    init(table: String, device: String, limit: Int) {
        self.table = table
        self.device = device
        self.limit = limit
    }

    /// Runs `write` (an insert-or-replace of `id`) unless `id` is new and the device is at its limit.
    mutating func put(_ id: String, _ db: Database, write: () throws -> Void) throws -> ChangeOutcome {
        let statement = try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM \(table) WHERE device = ? AND id = ?)")
        if try Bool.fetchOne(statement, arguments: [device, id]) ?? false {
            try write()
            return .replaced
        }
        let current = try count ?? Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(table) WHERE device = ?", arguments: [device]) ?? 0
        count = current
        guard current < limit else { return .limitReached }
        try write()
        count = current + 1
        return .created
    }

    mutating func delete(_ id: String, _ db: Database) throws -> ChangeOutcome {
        try db.cachedStatement(sql: "DELETE FROM \(table) WHERE device = ? AND id = ?").execute(arguments: [device, id])
        guard db.changesCount > 0 else { return .absent }
        count = count.map { $0 - 1 }
        return .deleted
    }
}

/// Stored times are signed 64-bit; negative ones never come from this server.
func milliseconds(_ value: Int64) -> UInt64 {
    UInt64(clamping: value)
}

/// The database file cannot be opened or created.
public struct DatabaseOpenError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// A row holds a value this server never writes.
struct CorruptRow: Error, CustomStringConvertible {
    var what: String
    init(_ what: String) { self.what = what }
    var description: String { "corrupt database row: \(what)" }
}
