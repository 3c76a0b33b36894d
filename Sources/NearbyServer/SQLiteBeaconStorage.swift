import Foundation
import GRDB
import ServerAPI

/// ``BeaconStorage`` in the tables of migration v4 (SQLiteStorage.swift).
extension SQLiteStorage {
    // MARK: Beacons

    public func registerBeacon(_ beacon: StoredBeacon) async throws {
        try await pool.write { db in
            try Self.requireProject(beacon.project, db)
            let key: StatementArguments = [beacon.id.type.rawValue, beacon.id.bytes]
            let described = try Self.describing(beacon)
            if try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM retiredBeacon WHERE type = ? AND id = ?)", arguments: key) ?? false {
                throw StorageError.beaconRetired(beacon.id.name)
            }
            if try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM beacon WHERE type = ? AND id = ?)", arguments: key) ?? false {
                throw StorageError.beaconRegistered(beacon.id.name)
            }
            try db.execute(sql: """
                INSERT INTO beacon (type, id, project, status, description, properties, expectedStability, indoorLevel,
                                    latitude, longitude, placeId, createdAtMs)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: key + [beacon.project, beacon.status.rawValue] + described + [Int64(clamping: beacon.createdAtMs)])
        }
    }

    public func beacon(_ id: BeaconID) async throws -> StoredBeacon? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.beaconColumns) FROM beacon WHERE type = ? AND id = ?",
                             arguments: [id.type.rawValue, id.bytes]).map(Self.beacon)
        }
    }

    public func beacons(project: String, filter: BeaconFilter, after: Int64, limit: Int) async throws -> BeaconPage {
        var conditions = ["project = ?"]
        var arguments: StatementArguments = [project]
        for status in filter.statuses {
            conditions.append("status = ?")
            arguments += [status.rawValue]
        }
        for type in filter.types {
            conditions.append("type = ?")
            arguments += [type.rawValue]
        }
        for text in filter.descriptions {
            conditions.append("instr(lower(coalesce(description, '')), lower(?)) > 0")
            arguments += [text]
        }
        let condition = conditions.joined(separator: " AND ")
        let filtering = arguments
        return try await pool.read { db in
            let total = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM beacon WHERE \(condition)", arguments: filtering) ?? 0
            // One more than asked, to know whether another page follows.
            let rows = try Row.fetchAll(db, sql: """
                SELECT position, \(Self.beaconColumns) FROM beacon WHERE \(condition) AND position > ? ORDER BY position LIMIT ?
                """, arguments: filtering + [after, limit + 1])
            let page = rows.prefix(limit)
            let last: Int64? = page.last?["position"]
            return BeaconPage(beacons: try page.map(Self.beacon), totalCount: total, next: rows.count > limit ? last : nil)
        }
    }

    public func updateBeacon(_ beacon: StoredBeacon) async throws -> Bool {
        let described = try Self.describing(beacon)
        return try await pool.write { db in
            try db.execute(sql: """
                UPDATE beacon SET description = ?, properties = ?, expectedStability = ?, indoorLevel = ?, latitude = ?,
                                  longitude = ?, placeId = ?
                WHERE type = ? AND id = ? AND project = ? AND status != 'DECOMMISSIONED'
                """, arguments: described + [beacon.id.type.rawValue, beacon.id.bytes, beacon.project])
            return db.changesCount > 0
        }
    }

    public func setBeaconStatus(_ id: BeaconID, project: String, status: BeaconStatus, atMs: UInt64) async throws -> Bool {
        try await pool.write { db in
            let key: StatementArguments = [id.type.rawValue, id.bytes]
            // Nothing brings a decommissioned beacon back.
            let keep = status == .decommissioned ? "" : " AND status != 'DECOMMISSIONED'"
            try db.execute(sql: "UPDATE beacon SET status = ? WHERE type = ? AND id = ? AND project = ?\(keep)",
                           arguments: [status.rawValue] + key + [project])
            guard db.changesCount > 0 else { return false }
            if status == .decommissioned {
                try db.execute(sql: "INSERT OR IGNORE INTO retiredBeacon (type, id, retiredAtMs) VALUES (?, ?, ?)",
                               arguments: key + [Int64(clamping: atMs)])
            }
            return true
        }
    }

    public func deleteBeacon(_ id: BeaconID, project: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM beacon WHERE type = ? AND id = ? AND project = ?",
                           arguments: [id.type.rawValue, id.bytes, project])
            return db.changesCount > 0
        }
    }

    // MARK: Observations

    public func activeBeacons(_ ids: [BeaconID], attachmentNamespaces: Set<String>) async throws -> [ObservedBeacon] {
        try await pool.read { db in
            let beaconStatement = try db.cachedStatement(sql: """
                SELECT position, \(Self.beaconColumns) FROM beacon WHERE type = ? AND id = ? AND status = 'ACTIVE'
                """)
            var observed: [ObservedBeacon] = []
            for id in ids {
                guard let row = try Row.fetchOne(beaconStatement, arguments: [id.type.rawValue, id.bytes]) else { continue }
                let beacon = try Self.beacon(row)
                let position: Int64 = row["position"]
                var attachments: [StoredAttachment] = []
                if !attachmentNamespaces.isEmpty {
                    attachments = try Row.fetchAll(db, sql: """
                        SELECT id, namespace, type, data, createdAtMs FROM attachment
                        WHERE beacon = ? AND namespace IN (\(Self.placeholders(attachmentNamespaces.count))) ORDER BY position
                        """, arguments: [position] + StatementArguments(Array(attachmentNamespaces)))
                        .map { Self.attachment($0, of: beacon.id) }
                }
                observed.append(ObservedBeacon(beacon: beacon, attachments: attachments))
            }
            return observed
        }
    }

    public func recordTelemetry(_ telemetry: [BeaconTelemetry]) async throws {
        try await pool.write { db in
            let statement = try db.cachedStatement(sql: """
                UPDATE beacon SET lastTelemetry = ?, lastTelemetryAtMs = ? WHERE type = ? AND id = ? AND status = 'ACTIVE'
                """)
            for record in telemetry {
                try statement.execute(arguments: [record.telemetry, Int64(clamping: record.observedAtMs),
                                                  record.beacon.type.rawValue, record.beacon.bytes])
            }
        }
    }

    // MARK: Attachments

    public func addAttachment(_ attachment: StoredAttachment, project: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: """
                INSERT INTO attachment (beacon, id, namespace, type, data, createdAtMs)
                SELECT position, ?, ?, ?, ?, ? FROM beacon WHERE type = ? AND id = ? AND project = ?
                """, arguments: [attachment.id, attachment.namespace, attachment.type, attachment.data,
                                 Int64(clamping: attachment.createdAtMs), attachment.beacon.type.rawValue,
                                 attachment.beacon.bytes, project])
            return db.changesCount > 0
        }
    }

    public func attachments(of beacon: BeaconID, project: String, filter: AttachmentFilter) async throws -> [StoredAttachment] {
        guard !filter.namespaces.isEmpty else { return [] }
        let (condition, arguments) = Self.attachmentCondition(beacon, project, filter)
        return try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT id, namespace, type, data, createdAtMs FROM attachment WHERE \(condition) ORDER BY position",
                             arguments: arguments).map { Self.attachment($0, of: beacon) }
        }
    }

    public func deleteAttachment(id: String, of beacon: BeaconID, project: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM attachment WHERE id = ? AND beacon = (\(Self.beaconPosition))",
                           arguments: [id, beacon.type.rawValue, beacon.bytes, project])
            return db.changesCount > 0
        }
    }

    public func deleteAttachments(of beacon: BeaconID, project: String, filter: AttachmentFilter) async throws -> Int {
        guard !filter.namespaces.isEmpty else { return 0 }
        let (condition, arguments) = Self.attachmentCondition(beacon, project, filter)
        return try await pool.write { db in
            try db.execute(sql: "DELETE FROM attachment WHERE \(condition)", arguments: arguments)
            return db.changesCount
        }
    }

    /// The project's beacon's position, from its type, id and project.
    private static let beaconPosition = "SELECT position FROM beacon WHERE type = ? AND id = ? AND project = ?"

    /// The attachments of the project's beacon that pass `filter` (whose namespaces are not empty).
    private static func attachmentCondition(_ beacon: BeaconID, _ project: String,
                                            _ filter: AttachmentFilter) -> (String, StatementArguments) {
        var condition = "beacon = (\(beaconPosition)) AND namespace IN (\(placeholders(filter.namespaces.count)))"
        var arguments: StatementArguments = [beacon.type.rawValue, beacon.bytes, project]
        arguments += StatementArguments(Array(filter.namespaces))
        if let type = filter.type {
            condition += " AND type = ?"
            arguments += [type]
        }
        return (condition, arguments)
    }

    // MARK: Namespaces

    public func namespaces(project: String) async throws -> [StoredNamespace] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT name, project, servingVisibility FROM namespace WHERE project = ? ORDER BY name",
                             arguments: [project]).map(Self.namespace)
        }
    }

    public func namespaces(named names: Set<String>) async throws -> [StoredNamespace] {
        guard !names.isEmpty else { return [] }
        return try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT name, project, servingVisibility FROM namespace WHERE name IN (\(Self.placeholders(names.count))) ORDER BY name
                """, arguments: StatementArguments(Array(names))).map(Self.namespace)
        }
    }

    public func setServingVisibility(_ visibility: ServingVisibility, namespace: String, project: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "UPDATE namespace SET servingVisibility = ? WHERE name = ? AND project = ?",
                           arguments: [visibility.rawValue, namespace, project])
            return db.changesCount > 0
        }
    }

    // MARK: Rows

    private static let beaconColumns = """
        type, id, project, status, description, properties, expectedStability, indoorLevel, latitude, longitude, placeId,
        createdAtMs, lastTelemetry, lastTelemetryAtMs
        """

    /// The values of description, properties, expectedStability, indoorLevel,
    /// latitude, longitude and placeId, in that order.
    private static func describing(_ beacon: StoredBeacon) throws -> StatementArguments {
        [beacon.description, try StoredColumns.json(beacon.properties), beacon.expectedStability, beacon.indoorLevel,
         beacon.latLng?.latitude, beacon.latLng?.longitude, beacon.placeId]
    }

    private static func beacon(_ row: Row) throws -> StoredBeacon {
        let latitude: Double? = row["latitude"]
        let longitude: Double? = row["longitude"]
        let telemetryAt: Int64? = row["lastTelemetryAtMs"]
        return StoredBeacon(id: try StoredColumns.beaconID(type: row["type"], bytes: row["id"]), project: row["project"],
                            status: try StoredColumns.beaconStatus(row["status"]), description: row["description"],
                            properties: try StoredColumns.properties(row["properties"]), expectedStability: row["expectedStability"],
                            indoorLevel: row["indoorLevel"],
                            latLng: latitude.flatMap { latitude in longitude.map { LatLng(latitude: latitude, longitude: $0) } },
                            placeId: row["placeId"], createdAtMs: milliseconds(row["createdAtMs"]),
                            lastTelemetry: row["lastTelemetry"], lastTelemetryAtMs: telemetryAt.map(milliseconds))
    }

    private static func attachment(_ row: Row, of beacon: BeaconID) -> StoredAttachment {
        StoredAttachment(beacon: beacon, id: row["id"], namespace: row["namespace"], type: row["type"], data: row["data"],
                         createdAtMs: milliseconds(row["createdAtMs"]))
    }

    private static func namespace(_ row: Row) throws -> StoredNamespace {
        StoredNamespace(name: row["name"], project: row["project"],
                        servingVisibility: try StoredColumns.visibility(row["servingVisibility"]))
    }

    private static func placeholders(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ",")
    }
}
