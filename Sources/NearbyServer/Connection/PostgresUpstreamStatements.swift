import PostgresNIO

/// The statements of the connection server's group commit
/// (``PostgresStorage/write(_:)``), prepared once per connection.
///
/// Why prepared: PostgreSQL plans an unnamed statement, as PostgresNIO's
/// `query` sends each one, every time it runs, and planning was most of what
/// these statements cost it (doc/performance.md, "Fewer statements a batch,
/// tried and taken back"). A prepared statement is planned for its first
/// runs and then, once PostgreSQL finds its generic plan no worse, not again.
enum PostgresUpstreamStatements {
    /// The columns of a stored upstream message, in ``UpstreamRow``'s order.
    static let upstreamColumns =
        "position, project, device, app, messageId, data, receivedAtMs, expiresAtMs, verdict, verdictDescription"
    /// ``upstreamColumns`` where another table's columns have the same names.
    static let qualifiedUpstreamColumns = upstreamColumns.split(separator: ", ").map { "upstream.\($0)" }.joined(separator: ", ")

    /// A row of ``upstreamColumns``.
    typealias UpstreamRow = (Int64, String, String, String, String, String, Int64, Int64, String?, String?)

    /// The message of a row of ``upstreamColumns``.
    static func upstream(_ row: UpstreamRow) throws -> StoredUpstream {
        let (position, project, device, app, messageId, data, receivedAt, expiresAt, verdict, verdictDescription) = row
        return StoredUpstream(position: position, project: project, device: device, app: app, messageId: messageId,
                              data: try StoredColumns.dictionary(data), receivedAtMs: milliseconds(receivedAt),
                              expiresAtMs: milliseconds(expiresAt),
                              verdict: StoredColumns.verdict(code: verdict, description: verdictDescription))
    }

    /// Locks the devices' rows that exist, in order of id (so that two
    /// replicas' batches cannot deadlock); returns their ids.
    struct LockDevices: PostgresPreparedStatement {
        static let sql = "SELECT id FROM device WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE"
        typealias Row = String
        let devices: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(devices)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The stored messages of the given (device, app, id)s.
    struct KnownUpstream: PostgresPreparedStatement {
        static let sql = """
            SELECT \(upstreamColumns) FROM upstream WHERE (device, app, messageId) IN (
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
            """
        typealias Row = UpstreamRow
        let devices, apps, messageIds: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(devices)
            bindings.append(apps)
            bindings.append(messageIds)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// How many messages each of the devices has kept, settled or not.
    struct KeptCounts: PostgresPreparedStatement {
        static let sql = "SELECT device, COUNT(*) FROM upstream WHERE device = ANY($1::text[]) GROUP BY device"
        typealias Row = (String, Int64)
        let devices: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(devices)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Inserts messages, positions in the order given (WITH ORDINALITY …
    /// ORDER BY); returns each one's position with its key.
    struct InsertUpstream: PostgresPreparedStatement {
        static let sql = """
            INSERT INTO upstream (project, device, app, messageId, data, receivedAtMs, expiresAtMs)
            SELECT project, device, app, messageId, data, receivedAtMs, expiresAtMs
            FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[])
                WITH ORDINALITY AS new (project, device, app, messageId, data, receivedAtMs, expiresAtMs, ordinal)
            ORDER BY ordinal
            RETURNING position, device, app, messageId
            """
        typealias Row = (Int64, String, String, String)
        let messages: [StoredUpstream]
        /// Each message's data, as stored.
        let data: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(messages.map(\.project))
            bindings.append(messages.map(\.device))
            bindings.append(messages.map(\.app))
            bindings.append(messages.map(\.messageId))
            bindings.append(data)
            bindings.append(messages.map { Int64(clamping: $0.receivedAtMs) })
            bindings.append(messages.map { Int64(clamping: $0.expiresAtMs) })
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The pending messages of the given (project, device, id)s, oldest first.
    struct PendingUpstream: PostgresPreparedStatement {
        static let sql = """
            SELECT position, project, device, messageId FROM upstream
            WHERE verdict IS NULL AND (project, device, messageId) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
            ORDER BY position
            """
        typealias Row = (Int64, String, String, String)
        let projects, devices, messageIds: [String]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(projects)
            bindings.append(devices)
            bindings.append(messageIds)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Gives pending messages their verdicts; returns those it settled.
    struct SettleUpstream: PostgresPreparedStatement {
        static let sql = """
            UPDATE upstream SET verdict = new.code,
                verdictDescription = CASE WHEN new.described THEN new.description END, settledAtMs = new.atMs
            FROM unnest($1::bigint[], $2::text[], $3::text[], $4::boolean[], $5::bigint[])
                AS new (position, code, description, described, atMs)
            WHERE upstream.position = new.position AND upstream.verdict IS NULL
            RETURNING \(qualifiedUpstreamColumns)
            """
        typealias Row = UpstreamRow
        let positions: [Int64]
        let codes: [String]
        /// The descriptions, nil where a verdict has none.
        let descriptions: [String?]
        let atMs: [Int64]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(positions)
            bindings.append(codes)
            bindings.append(descriptions.map { $0 ?? "" })
            bindings.append(descriptions.map { $0 != nil })
            bindings.append(atMs)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Claims up to `limit` of the project's receipts no replica holds.
    /// SKIP LOCKED: replicas claiming at once each take other rows, none waits.
    struct ClaimReceipts: PostgresPreparedStatement {
        static let sql = """
            UPDATE receipt SET claimedBy = $1, claimedUntilMs = $2 WHERE position IN (
                SELECT position FROM receipt WHERE project = $3 AND (claimedBy IS NULL OR claimedUntilMs <= $4)
                ORDER BY position LIMIT $5 FOR UPDATE SKIP LOCKED)
            RETURNING position, project, messageId, payload
            """
        typealias Row = (Int64, String, String, String)
        let replica: String
        let untilMs: Int64
        let project: String
        let nowMs: Int64
        let limit: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(replica)
            bindings.append(untilMs)
            bindings.append(project)
            bindings.append(nowMs)
            bindings.append(limit)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Claims up to `limit` of the project's pending messages that no
    /// replica holds and whose time has not run out (TTL 0: within
    /// `graceMs` of arrival). SKIP LOCKED as ``ClaimReceipts``.
    struct ClaimUpstream: PostgresPreparedStatement {
        static let sql = """
            UPDATE upstream SET claimedBy = $1, claimedUntilMs = $2 WHERE position IN (
                SELECT position FROM upstream
                WHERE project = $3 AND verdict IS NULL AND (claimedBy IS NULL OR claimedUntilMs <= $4)
                  AND (expiresAtMs > $4 OR (expiresAtMs <= receivedAtMs AND receivedAtMs + $5 > $4))
                ORDER BY position LIMIT $6 FOR UPDATE SKIP LOCKED)
            RETURNING \(upstreamColumns)
            """
        typealias Row = UpstreamRow
        let replica: String
        let untilMs: Int64
        let project: String
        let nowMs: Int64
        let graceMs: Int64
        let limit: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(replica)
            bindings.append(untilMs)
            bindings.append(project)
            bindings.append(nowMs)
            bindings.append(graceMs)
            bindings.append(limit)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }
}
