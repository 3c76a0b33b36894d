import Foundation
import PostgresNIO
import ServerAPI

/// ``BeaconStorage`` in the beacon tables of PostgresSchema.swift, as
/// SQLiteBeaconStorage.swift keeps it in SQLite's.
extension PostgresStorage {
    // MARK: Beacons

    public func registerBeacon(_ beacon: StoredBeacon) async throws {
        let properties = try StoredColumns.json(beacon.properties)
        let type = beacon.id.type.rawValue
        do {
            try await write { connection in
                guard try await count("SELECT 1 FROM project WHERE name = \(beacon.project)", on: connection) > 0 else {
                    throw StorageError.projectNotFound(beacon.project)
                }
                if try await count("SELECT 1 FROM retiredBeacon WHERE type = \(type) AND id = \(beacon.id.bytes)", on: connection) > 0 {
                    throw StorageError.beaconRetired(beacon.id.name)
                }
                if try await count("SELECT 1 FROM beacon WHERE type = \(type) AND id = \(beacon.id.bytes)", on: connection) > 0 {
                    throw StorageError.beaconRegistered(beacon.id.name)
                }
                try await connection.query("""
                    INSERT INTO beacon (type, id, project, status, description, properties, expectedStability, indoorLevel,
                                        latitude, longitude, placeId, createdAtMs)
                    VALUES (\(type), \(beacon.id.bytes), \(beacon.project), \(beacon.status.rawValue), \(beacon.description),
                            \(properties), \(beacon.expectedStability), \(beacon.indoorLevel), \(beacon.latLng?.latitude),
                            \(beacon.latLng?.longitude), \(beacon.placeId), \(Int64(clamping: beacon.createdAtMs)))
                    """, logger: logger)
            }
        } catch where Self.sqlState(error) == "23505" {
            // Another process registered the same id after the check.
            throw StorageError.beaconRegistered(beacon.id.name)
        } catch where Self.sqlState(error) == "23503" {
            throw StorageError.projectNotFound(beacon.project)
        }
    }

    public func beacon(_ id: BeaconID) async throws -> StoredBeacon? {
        try await read { connection in
            try await beacons("""
                SELECT position, \(unescaped: Self.beaconColumns) FROM beacon WHERE type = \(id.type.rawValue) AND id = \(id.bytes)
                """, on: connection).first?.beacon
        }
    }

    public func beacons(project: String, filter: BeaconFilter, after: Int64, limit: Int) async throws -> BeaconPage {
        // Each condition of each list must hold: a status equal to all those
        // listed (none: any), and every description a substring, ASCII case
        // folded (lower() of the "C" collation folds ASCII letters only).
        let condition = """
            project = $1 AND status = ALL($2) AND type = ALL($3)
            AND NOT EXISTS (SELECT 1 FROM unnest($4::TEXT[]) AS wanted(text)
                            WHERE strpos(lower(coalesce(description, '') COLLATE "C"), lower(wanted.text COLLATE "C")) = 0)
            """
        // The condition is written once for the count and for the page: SQL
        // text that is a constant, with numbered parameters, every value bound.
        var filtering = PostgresBindings()
        filtering.append(project)
        filtering.append(filter.statuses.map(\.rawValue))
        filtering.append(filter.types.map(\.rawValue))
        filtering.append(filter.descriptions)
        var paging = filtering
        paging.append(after)
        // One more than asked, to know whether another page follows.
        paging.append(limit + 1)
        return try await read { connection in
            let total = try await value(Int.self, PostgresQuery(unsafeSQL: "SELECT COUNT(*) FROM beacon WHERE \(condition)",
                                                                binds: filtering), on: connection) ?? 0
            let rows = try await beacons(PostgresQuery(unsafeSQL: """
                SELECT position, \(Self.beaconColumns) FROM beacon WHERE \(condition) AND position > $5 ORDER BY position LIMIT $6
                """, binds: paging), on: connection)
            let page = rows.prefix(limit)
            return BeaconPage(beacons: page.map(\.beacon), totalCount: total, next: rows.count > limit ? page.last?.position : nil)
        }
    }

    public func updateBeacon(_ beacon: StoredBeacon) async throws -> Bool {
        let properties = try StoredColumns.json(beacon.properties)
        return try await write { connection in
            try await count("""
                UPDATE beacon SET description = \(beacon.description), properties = \(properties),
                                  expectedStability = \(beacon.expectedStability), indoorLevel = \(beacon.indoorLevel),
                                  latitude = \(beacon.latLng?.latitude), longitude = \(beacon.latLng?.longitude),
                                  placeId = \(beacon.placeId)
                WHERE type = \(beacon.id.type.rawValue) AND id = \(beacon.id.bytes) AND project = \(beacon.project)
                      AND status != 'DECOMMISSIONED'
                RETURNING 1
                """, on: connection) > 0
        }
    }

    public func setBeaconStatus(_ id: BeaconID, project: String, status: BeaconStatus, atMs: UInt64) async throws -> Bool {
        let type = id.type.rawValue
        return try await write { connection in
            // Nothing brings a decommissioned beacon back.
            let changed = if status == .decommissioned {
                try await count("""
                    UPDATE beacon SET status = \(status.rawValue) WHERE type = \(type) AND id = \(id.bytes) AND project = \(project)
                    RETURNING 1
                    """, on: connection)
            } else {
                try await count("""
                    UPDATE beacon SET status = \(status.rawValue) WHERE type = \(type) AND id = \(id.bytes) AND project = \(project)
                                                                    AND status != 'DECOMMISSIONED'
                    RETURNING 1
                    """, on: connection)
            }
            guard changed > 0 else { return false }
            if status == .decommissioned {
                try await connection.query("""
                    INSERT INTO retiredBeacon (type, id, retiredAtMs) VALUES (\(type), \(id.bytes), \(Int64(clamping: atMs)))
                    ON CONFLICT DO NOTHING
                    """, logger: logger)
            }
            return true
        }
    }

    public func deleteBeacon(_ id: BeaconID, project: String) async throws -> Bool {
        try await write { connection in
            try await count("""
                DELETE FROM beacon WHERE type = \(id.type.rawValue) AND id = \(id.bytes) AND project = \(project) RETURNING 1
                """, on: connection) > 0
        }
    }

    // MARK: Observations

    public func activeBeacons(_ ids: [BeaconID], attachmentNamespaces: Set<String>) async throws -> [ObservedBeacon] {
        let namespaces = Array(attachmentNamespaces)
        return try await read { connection in
            var observed: [ObservedBeacon] = []
            for id in ids {
                guard let found = try await beacons("""
                    SELECT position, \(unescaped: Self.beaconColumns) FROM beacon
                    WHERE type = \(id.type.rawValue) AND id = \(id.bytes) AND status = 'ACTIVE'
                    """, on: connection).first else { continue }
                let attachments = namespaces.isEmpty ? [] : try await attachments("""
                    SELECT id, namespace, type, data, createdAtMs FROM attachment
                    WHERE beacon = \(found.position) AND namespace = ANY(\(namespaces)) ORDER BY position
                    """, of: found.beacon.id, on: connection)
                observed.append(ObservedBeacon(beacon: found.beacon, attachments: attachments))
            }
            return observed
        }
    }

    public func recordTelemetry(_ telemetry: [BeaconTelemetry]) async throws {
        // One row each, in one order: two observations naming the same
        // beacons in opposite orders would otherwise lock them A→B and B→A
        // and deadlock. The last record of a beacon wins, as applied in turn.
        var latest: [BeaconID: BeaconTelemetry] = [:]
        for record in telemetry { latest[record.beacon] = record }
        let ordered = latest.values.sorted { a, b in
            a.beacon.type.rawValue != b.beacon.type.rawValue
                ? a.beacon.type.rawValue < b.beacon.type.rawValue
                : a.beacon.bytes.lexicographicallyPrecedes(b.beacon.bytes)
        }
        try await write { connection in
            for record in ordered {
                try await connection.query("""
                    UPDATE beacon SET lastTelemetry = \(record.telemetry), lastTelemetryAtMs = \(Int64(clamping: record.observedAtMs))
                    WHERE type = \(record.beacon.type.rawValue) AND id = \(record.beacon.bytes) AND status = 'ACTIVE'
                    """, logger: logger)
            }
        }
    }

    // MARK: Attachments

    public func addAttachment(_ attachment: StoredAttachment, project: String) async throws -> Bool {
        try await write { connection in
            try await count("""
                INSERT INTO attachment (beacon, id, namespace, type, data, createdAtMs)
                SELECT position, \(attachment.id), \(attachment.namespace), \(attachment.type), \(attachment.data),
                       \(Int64(clamping: attachment.createdAtMs))
                FROM beacon WHERE type = \(attachment.beacon.type.rawValue) AND id = \(attachment.beacon.bytes) AND project = \(project)
                RETURNING 1
                """, on: connection) > 0
        }
    }

    public func attachments(of beacon: BeaconID, project: String, filter: AttachmentFilter) async throws -> [StoredAttachment] {
        guard !filter.namespaces.isEmpty else { return [] }
        return try await read { connection in
            try await attachments("""
                SELECT id, namespace, type, data, createdAtMs FROM attachment
                WHERE beacon = (SELECT position FROM beacon WHERE type = \(beacon.type.rawValue) AND id = \(beacon.bytes)
                                                              AND project = \(project))
                      AND namespace = ANY(\(Array(filter.namespaces))) AND (\(filter.type)::TEXT IS NULL OR type = \(filter.type))
                ORDER BY position
                """, of: beacon, on: connection)
        }
    }

    public func deleteAttachment(id: String, of beacon: BeaconID, project: String) async throws -> Bool {
        try await write { connection in
            try await count("""
                DELETE FROM attachment
                WHERE id = \(id) AND beacon = (SELECT position FROM beacon WHERE type = \(beacon.type.rawValue) AND id = \(beacon.bytes)
                                                                            AND project = \(project))
                RETURNING 1
                """, on: connection) > 0
        }
    }

    public func deleteAttachments(of beacon: BeaconID, project: String, filter: AttachmentFilter) async throws -> Int {
        guard !filter.namespaces.isEmpty else { return 0 }
        return try await write { connection in
            try await count("""
                DELETE FROM attachment
                WHERE beacon = (SELECT position FROM beacon WHERE type = \(beacon.type.rawValue) AND id = \(beacon.bytes)
                                                              AND project = \(project))
                      AND namespace = ANY(\(Array(filter.namespaces))) AND (\(filter.type)::TEXT IS NULL OR type = \(filter.type))
                RETURNING 1
                """, on: connection)
        }
    }

    // MARK: Namespaces

    public func namespaces(project: String) async throws -> [StoredNamespace] {
        try await namespaces("""
            SELECT name, project, servingVisibility FROM namespace WHERE project = \(project) ORDER BY name COLLATE "C"
            """)
    }

    public func namespaces(named names: Set<String>) async throws -> [StoredNamespace] {
        guard !names.isEmpty else { return [] }
        return try await namespaces("""
            SELECT name, project, servingVisibility FROM namespace WHERE name = ANY(\(Array(names))) ORDER BY name COLLATE "C"
            """)
    }

    public func setServingVisibility(_ visibility: ServingVisibility, namespace: String, project: String) async throws -> Bool {
        try await write { connection in
            try await count("""
                UPDATE namespace SET servingVisibility = \(visibility.rawValue) WHERE name = \(namespace) AND project = \(project)
                RETURNING 1
                """, on: connection) > 0
        }
    }

    // MARK: Rows

    private static let beaconColumns = """
        type, id, project, status, description, properties, expectedStability, indoorLevel, latitude, longitude, placeId,
        createdAtMs, lastTelemetry, lastTelemetryAtMs
        """

    /// The beacons, with their positions, that a query of `position` and ``beaconColumns`` finds.
    private func beacons(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> [(position: Int64, beacon: StoredBeacon)] {
        var found: [(position: Int64, beacon: StoredBeacon)] = []
        for try await (position, type, id, project, status, description, properties, expectedStability, indoorLevel, latitude,
                       longitude, placeId, createdAt, lastTelemetry, lastTelemetryAt) in try await connection.query(query, logger: logger)
            .decode((Int64, String, Data, String, String, String?, String, String?, String?, Double?, Double?, String?, Int64, Data?,
                     Int64?).self) {
            let beacon = StoredBeacon(
                id: try StoredColumns.beaconID(type: type, bytes: id), project: project, status: try StoredColumns.beaconStatus(status),
                description: description, properties: try StoredColumns.properties(properties), expectedStability: expectedStability,
                indoorLevel: indoorLevel,
                latLng: latitude.flatMap { latitude in longitude.map { LatLng(latitude: latitude, longitude: $0) } },
                placeId: placeId, createdAtMs: milliseconds(createdAt), lastTelemetry: lastTelemetry,
                lastTelemetryAtMs: lastTelemetryAt.map(milliseconds))
            found.append((position, beacon))
        }
        return found
    }

    /// The attachments of `beacon` that a query of their five columns finds.
    private func attachments(_ query: PostgresQuery, of beacon: BeaconID, on connection: PostgresConnection) async throws -> [StoredAttachment] {
        var attachments: [StoredAttachment] = []
        for try await (id, namespace, type, data, createdAt) in try await connection.query(query, logger: logger)
            .decode((String, String, String, Data, Int64).self) {
            attachments.append(StoredAttachment(beacon: beacon, id: id, namespace: namespace, type: type, data: data,
                                                createdAtMs: milliseconds(createdAt)))
        }
        return attachments
    }

    private func namespaces(_ query: PostgresQuery) async throws -> [StoredNamespace] {
        try await read { connection in
            var namespaces: [StoredNamespace] = []
            for try await (name, project, visibility) in try await connection.query(query, logger: logger)
                .decode((String, String, String).self) {
                namespaces.append(StoredNamespace(name: name, project: project, servingVisibility: try StoredColumns.visibility(visibility)))
            }
            return namespaces
        }
    }
}

