import Logging
import PostgresNIO

/// The PostgreSQL engine's tables, as versioned migrations that
/// ``PostgresStorage`` applies at start. Version 1 is the shape that SQLite's
/// migrations v1 to v7 reach (SQLiteStorage.swift says why each table is
/// there), version 2 its v8, version 4 its v9 (versions 3 and 5 are
/// PostgreSQL's own: PostgresReplicaBus, partition leases), in PostgreSQL's types: BIGINT for times in milliseconds (the
/// server's UInt64 values clamped to Int64, as SQLite stores them), BYTEA for
/// hashes, tokens and blobs, BIGSERIAL for the positions that order the logs
/// and listings, and PL/pgSQL functions for SQLite's triggers. Identifiers are
/// unquoted, so PostgreSQL folds them to lower case wherever they are written.
enum PostgresSchema {
    struct Migration {
        let version: Int32
        /// One query each: the extended protocol takes a statement at a time.
        let statements: [PostgresQuery]
    }

    /// Applies the migrations the database lacks, all in one transaction, and
    /// records each in `schema_version`. A transaction-level advisory lock
    /// makes replicas that start at once take turns: the second finds the
    /// work done. Versions it does not know (of a newer server) are left alone.
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            // (20034, 1): this server's key space (0x4E42, "NB"), its migrations.
            try await connection.query("SELECT pg_advisory_xact_lock(20034, 1)", logger: logger)
            try await connection.query("""
                CREATE TABLE IF NOT EXISTS schema_version (
                    version INTEGER PRIMARY KEY,
                    appliedAt TIMESTAMPTZ NOT NULL DEFAULT now()
                )
                """, logger: logger)
            var applied = Set<Int32>()
            for try await version in try await connection.query("SELECT version FROM schema_version", logger: logger).decode(Int32.self) {
                applied.insert(version)
            }
            for migration in migrations where !applied.contains(migration.version) {
                for statement in migration.statements {
                    try await connection.query(statement, logger: logger)
                }
                try await connection.query("INSERT INTO schema_version (version) VALUES (\(migration.version))", logger: logger)
            }
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    static let migrations = [
        Migration(version: 1, statements: [
            """
            CREATE TABLE project (
                name TEXT PRIMARY KEY,
                namespace TEXT NOT NULL UNIQUE,
                createdAtMs BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE apiKey (
                hash BYTEA PRIMARY KEY,
                project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                createdAtMs BIGINT NOT NULL
            )
            """,
            "CREATE INDEX apiKey_project ON apiKey(project)",
            """
            CREATE TABLE adminKey (
                project TEXT PRIMARY KEY REFERENCES project(name) ON DELETE CASCADE,
                hash BYTEA NOT NULL UNIQUE,
                createdAtMs BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE serverKey (
                project TEXT PRIMARY KEY REFERENCES project(name) ON DELETE CASCADE,
                hash BYTEA NOT NULL UNIQUE,
                createdAtMs BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE projectDeletion (
                position BIGSERIAL PRIMARY KEY,
                project TEXT NOT NULL
            )
            """,
            """
            CREATE TABLE device (
                id TEXT PRIMARY KEY,
                project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                secretHash BYTEA NOT NULL UNIQUE,
                createdAtMs BIGINT NOT NULL,
                lastSeenAtMs BIGINT NOT NULL
            )
            """,
            "CREATE INDEX device_project ON device(project)",
            "CREATE INDEX device_lastSeenAtMs ON device(lastSeenAtMs)",
            """
            CREATE TABLE deviceDeletion (
                position BIGSERIAL PRIMARY KEY,
                device TEXT NOT NULL,
                project TEXT NOT NULL,
                deletedAtMs BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE deletedDevice (
                id TEXT PRIMARY KEY,
                project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                deletedAtMs BIGINT NOT NULL
            )
            """,
            "CREATE INDEX deletedDevice_deletedAtMs ON deletedDevice(deletedAtMs)",
            """
            CREATE TABLE token (
                token BYTEA PRIMARY KEY,
                device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                issuedAtMs BIGINT NOT NULL,
                expiresAtMs BIGINT NOT NULL
            )
            """,
            "CREATE INDEX token_device ON token(device)",
            "CREATE INDEX token_expiresAtMs ON token(expiresAtMs)",
            """
            CREATE TABLE publication (
                device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                id TEXT NOT NULL,
                namespace TEXT NOT NULL,
                type TEXT NOT NULL,
                content BYTEA NOT NULL,
                mediums TEXT NOT NULL,
                mode TEXT NOT NULL,
                expiresAtMs BIGINT NOT NULL,
                distance TEXT NOT NULL DEFAULT 'default',
                PRIMARY KEY (device, id)
            )
            """,
            "CREATE INDEX publication_expiresAtMs ON publication(expiresAtMs)",
            """
            CREATE TABLE subscription (
                device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                id TEXT NOT NULL,
                namespace TEXT NOT NULL,
                type TEXT NOT NULL,
                mediums TEXT NOT NULL,
                mode TEXT NOT NULL,
                expiresAtMs BIGINT NOT NULL,
                distance TEXT NOT NULL DEFAULT 'default',
                PRIMARY KEY (device, id)
            )
            """,
            "CREATE INDEX subscription_expiresAtMs ON subscription(expiresAtMs)",
            """
            CREATE TABLE namespace (
                name TEXT PRIMARY KEY,
                project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                servingVisibility TEXT NOT NULL DEFAULT 'UNLISTED'
            )
            """,
            "CREATE INDEX namespace_project ON namespace(project)",
            """
            CREATE TABLE beacon (
                position BIGSERIAL PRIMARY KEY,
                type TEXT NOT NULL,
                id BYTEA NOT NULL,
                project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                status TEXT NOT NULL,
                description TEXT,
                properties TEXT NOT NULL,
                expectedStability TEXT,
                indoorLevel TEXT,
                latitude DOUBLE PRECISION,
                longitude DOUBLE PRECISION,
                placeId TEXT,
                createdAtMs BIGINT NOT NULL,
                lastTelemetry BYTEA,
                lastTelemetryAtMs BIGINT,
                UNIQUE (type, id)
            )
            """,
            "CREATE INDEX beacon_project ON beacon(project, position)",
            """
            CREATE TABLE retiredBeacon (
                type TEXT NOT NULL,
                id BYTEA NOT NULL,
                retiredAtMs BIGINT NOT NULL,
                PRIMARY KEY (type, id)
            )
            """,
            """
            CREATE TABLE attachment (
                position BIGSERIAL PRIMARY KEY,
                beacon BIGINT NOT NULL REFERENCES beacon(position) ON DELETE CASCADE,
                id TEXT NOT NULL,
                namespace TEXT NOT NULL REFERENCES namespace(name) ON DELETE CASCADE,
                type TEXT NOT NULL,
                data BYTEA NOT NULL,
                createdAtMs BIGINT NOT NULL,
                UNIQUE (beacon, id)
            )
            """,
            "CREATE INDEX attachment_beacon_namespace ON attachment(beacon, namespace)",
            "CREATE INDEX attachment_namespace ON attachment(namespace)",
            """
            CREATE TABLE upstream (
                position BIGSERIAL PRIMARY KEY,
                project TEXT NOT NULL,
                device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                app TEXT NOT NULL,
                messageId TEXT NOT NULL,
                data TEXT NOT NULL,
                receivedAtMs BIGINT NOT NULL,
                expiresAtMs BIGINT NOT NULL,
                verdict TEXT,
                verdictDescription TEXT,
                settledAtMs BIGINT,
                UNIQUE (device, app, messageId)
            )
            """,
            "CREATE INDEX upstream_pending ON upstream(project, position) WHERE verdict IS NULL",
            "CREATE INDEX upstream_device_message ON upstream(device, messageId) WHERE verdict IS NULL",
            "CREATE INDEX upstream_expiresAtMs ON upstream(expiresAtMs)",
            """
            CREATE TABLE downstream (
                position BIGSERIAL PRIMARY KEY,
                project TEXT NOT NULL,
                device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                messageId TEXT NOT NULL,
                data TEXT NOT NULL,
                receivedAtMs BIGINT NOT NULL,
                expiresAtMs BIGINT NOT NULL,
                receiptRequested BOOLEAN NOT NULL
            )
            """,
            "CREATE INDEX downstream_device ON downstream(device, position)",
            "CREATE INDEX downstream_expiresAtMs ON downstream(expiresAtMs)",
            """
            CREATE TABLE receipt (
                position BIGSERIAL PRIMARY KEY,
                project TEXT NOT NULL REFERENCES project(name) ON DELETE CASCADE,
                messageId TEXT NOT NULL,
                payload TEXT NOT NULL
            )
            """,
            "CREATE INDEX receipt_project ON receipt(project, position)",
            // The database's clock: the logs of deletions are written by
            // every process that deletes (servers and the CLI), so no one
            // process's clock is theirs.
            """
            CREATE FUNCTION nearby_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
                $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$
            """,
            // A server reads the logs of deletions from a position on. A
            // BIGSERIAL is drawn when a row is inserted, not when it commits,
            // so two deleting transactions could commit their positions out of
            // order and a reader skip the smaller one for good. The advisory
            // lock (20034, 2), held until commit, makes deletions take turns:
            // positions commit in order. Deletions are rare; the wait is short.
            """
            CREATE FUNCTION project_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_advisory_xact_lock(20034, 2);
                INSERT INTO projectDeletion (project) VALUES (OLD.name);
                RETURN NULL;
            END $$
            """,
            "CREATE TRIGGER project_deleted AFTER DELETE ON project FOR EACH ROW EXECUTE FUNCTION project_deleted()",
            // A device of a project being deleted is logged, but its id is
            // not kept as deleted: the project's rows go (its own row is
            // already gone when its devices' are deleted).
            """
            CREATE FUNCTION device_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_advisory_xact_lock(20034, 2);
                DELETE FROM deviceDeletion WHERE deletedAtMs < nearby_now_ms() - 86400000;
                INSERT INTO deviceDeletion (device, project, deletedAtMs) VALUES (OLD.id, OLD.project, nearby_now_ms());
                IF EXISTS (SELECT 1 FROM project WHERE name = OLD.project) THEN
                    INSERT INTO deletedDevice (id, project, deletedAtMs) VALUES (OLD.id, OLD.project, nearby_now_ms())
                    ON CONFLICT (id) DO UPDATE SET project = EXCLUDED.project, deletedAtMs = EXCLUDED.deletedAtMs;
                END IF;
                RETURN NULL;
            END $$
            """,
            "CREATE TRIGGER device_deleted AFTER DELETE ON device FOR EACH ROW EXECUTE FUNCTION device_deleted()",
        ]),
        // device_deleted drops log entries older than a day at each device
        // deleted: without an index it read the whole log each time.
        Migration(version: 2, statements: [
            "CREATE INDEX deviceDeletion_deletedAtMs ON deviceDeletion(deletedAtMs)",
        ]),
        // Messages among the replicas too long for a NOTIFY's payload
        // (PostgresReplicaBus): the notification names the row.
        Migration(version: 3, statements: [
            """
            CREATE TABLE replicaMessage (
                id BIGSERIAL PRIMARY KEY,
                payload TEXT NOT NULL,
                createdAtMs BIGINT NOT NULL DEFAULT nearby_now_ms()
            )
            """,
        ]),
        // Claims of replicas on upstream messages and receipts (SQLite's v9).
        Migration(version: 4, statements: [
            "ALTER TABLE upstream ADD COLUMN claimedBy TEXT, ADD COLUMN claimedUntilMs BIGINT",
            "ALTER TABLE receipt ADD COLUMN claimedBy TEXT, ADD COLUMN claimedUntilMs BIGINT",
            "CREATE INDEX upstream_claimedBy ON upstream(claimedBy) WHERE claimedBy IS NOT NULL",
            "CREATE INDEX receipt_claimedBy ON receipt(claimedBy) WHERE claimedBy IS NOT NULL",
        ]),
        // The replicas alive, and which owns each partition of the devices
        // (Replication/PostgresPartitionLeases.swift); PostgreSQL's own, as
        // a server alone on SQLite owns them all.
        Migration(version: 5, statements: [
            """
            CREATE TABLE replicaMember (
                id TEXT PRIMARY KEY,
                url TEXT NOT NULL,
                untilMs BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE partitionLease (
                partition INTEGER PRIMARY KEY,
                owner TEXT NOT NULL,
                untilMs BIGINT NOT NULL
            )
            """,
        ]),
    ]
}
