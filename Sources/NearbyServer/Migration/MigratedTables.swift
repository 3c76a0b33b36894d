/// The tables `nearby-server migrate` copies from SQLite to PostgreSQL, and
/// their columns: the one list of them. Both engines have these tables with
/// these columns (SQLiteStorage.swift and PostgresSchema.swift); a test fails
/// when either schema has a table or column this list lacks, so that a table
/// added later is not left behind. PostgreSQL's own `schema_version`,
/// `replicaMessage` (messages among running replicas), `replicaMember` and
/// `partitionLease` (running replicas and their partitions) have nothing to
/// copy; nor have the columns of running servers' claims (`notCopied`).
enum MigratedTables {
    /// In an order in which every row's references are copied before it.
    static let all: [MigratedTable] = [
        MigratedTable("project", ["name": .text, "namespace": .text, "createdAtMs": .integer]),
        MigratedTable("apiKey", ["hash": .blob, "project": .text, "createdAtMs": .integer]),
        MigratedTable("adminKey", ["project": .text, "hash": .blob, "createdAtMs": .integer]),
        MigratedTable("serverKey", ["project": .text, "hash": .blob, "createdAtMs": .integer]),
        MigratedTable("namespace", ["name": .text, "project": .text, "servingVisibility": .text]),
        MigratedTable("device", ["id": .text, "project": .text, "secretHash": .blob, "createdAtMs": .integer,
                                 "lastSeenAtMs": .integer]),
        MigratedTable("token", ["token": .blob, "device": .text, "issuedAtMs": .integer, "expiresAtMs": .integer]),
        MigratedTable("publication", ["device": .text, "id": .text, "namespace": .text, "type": .text, "content": .blob,
                                      "mediums": .text, "mode": .text, "expiresAtMs": .integer, "distance": .text]),
        MigratedTable("subscription", ["device": .text, "id": .text, "namespace": .text, "type": .text, "mediums": .text,
                                       "mode": .text, "expiresAtMs": .integer, "distance": .text]),
        MigratedTable("beacon", ["position": .integer, "type": .text, "id": .blob, "project": .text, "status": .text,
                                 "description": .text, "properties": .text, "expectedStability": .text, "indoorLevel": .text,
                                 "latitude": .real, "longitude": .real, "placeId": .text, "createdAtMs": .integer,
                                 "lastTelemetry": .blob, "lastTelemetryAtMs": .integer],
                      serial: "position"),
        MigratedTable("retiredBeacon", ["type": .text, "id": .blob, "retiredAtMs": .integer]),
        MigratedTable("attachment", ["position": .integer, "beacon": .integer, "id": .text, "namespace": .text, "type": .text,
                                     "data": .blob, "createdAtMs": .integer],
                      serial: "position"),
        MigratedTable("upstream", ["position": .integer, "project": .text, "device": .text, "app": .text, "messageId": .text,
                                   "data": .text, "receivedAtMs": .integer, "expiresAtMs": .integer, "verdict": .text,
                                   "verdictDescription": .text, "settledAtMs": .integer],
                      serial: "position", notCopied: Self.claims),
        MigratedTable("downstream", ["position": .integer, "project": .text, "device": .text, "messageId": .text, "data": .text,
                                     "receivedAtMs": .integer, "expiresAtMs": .integer, "receiptRequested": .boolean],
                      serial: "position"),
        MigratedTable("receipt", ["position": .integer, "project": .text, "messageId": .text, "payload": .text],
                      serial: "position", notCopied: Self.claims),
        MigratedTable("deletedDevice", ["id": .text, "project": .text, "deletedAtMs": .integer]),
        // The logs of deletions, positions and all: a server reads them from
        // position 0 at start, and from where it was after that.
        MigratedTable("projectDeletion", ["position": .integer, "project": .text], serial: "position"),
        MigratedTable("deviceDeletion", ["position": .integer, "device": .text, "project": .text, "deletedAtMs": .integer],
                      serial: "position"),
    ]

    /// Which replica holds a message, and until when (ConnectionHub): the
    /// servers that held them are stopped, so the copies are unclaimed.
    private static let claims: KeyValuePairs<String, MigratedTable.Kind> = ["claimedBy": .text, "claimedUntilMs": .integer]
}

/// One table as the migration copies it.
struct MigratedTable: Sendable {
    /// How a column's values are read from SQLite and written to PostgreSQL.
    enum Kind: Sendable {
        /// SQLite INTEGER, PostgreSQL BIGINT.
        case integer
        /// TEXT in both.
        case text
        /// SQLite BLOB, PostgreSQL BYTEA.
        case blob
        /// SQLite REAL, PostgreSQL DOUBLE PRECISION.
        case real
        /// SQLite INTEGER 0 or 1, PostgreSQL BOOLEAN.
        case boolean
    }

    let name: String
    let columns: [(name: String, kind: Kind)]
    /// The BIGSERIAL column in PostgreSQL (an AUTOINCREMENT one in SQLite),
    /// whose sequence must continue past the positions copied.
    let serial: String?
    /// Columns both engines have that are left empty in the copy.
    let notCopied: [(name: String, kind: Kind)]

    /// `columns` in the order written: the order of the statements that read and write them.
    init(_ name: String, _ columns: KeyValuePairs<String, Kind>, serial: String? = nil,
         notCopied: KeyValuePairs<String, Kind> = [:]) {
        self.name = name
        self.columns = columns.map { (name: $0.key, kind: $0.value) }
        self.serial = serial
        self.notCopied = notCopied.map { (name: $0.key, kind: $0.value) }
    }
}
