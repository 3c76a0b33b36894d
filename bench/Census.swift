import Foundation
import TestSupport

/// What `nearby-bench soak` counts before and after the churn, each read from
/// outside the programs as an administrator would: /proc for memory,
/// descriptors and threads, busctl for nearbyd's objects, its permission
/// decisions and the bus's connections, sqlite3 for the rows of nearbyd's
/// outbox and of nearby-server's database.
struct Census: Sendable {
    /// A process's resources (/proc/PID/status and /proc/PID/fd).
    struct Resources: Sendable {
        var residentKiB = 0
        /// RssAnon: the resident part that is not a file's (heap, stacks).
        var anonymousKiB = 0
        /// VmHWM: the most it was resident at once since it started.
        var peakResidentKiB = 0
        var descriptors = 0
        /// Of the descriptors, TCP connections established (HTTP, WebSocket, XMPP).
        var tcpConnections = 0
        var threads = 0
        /// Threads by name (/proc/PID/task/*/comm), to tell which pool a change is in.
        var threadNames: [String: Int] = [:]

        /// Threads of libdispatch's worker pool (named after its root queues'
        /// qualities of service), which it starts when work is queued and ends
        /// once idle: GRDB's queues run on them.
        var poolThreads: Int { threadNames.filter { $0.key.contains("qos") }.values.reduce(0, +) }

        /// The names whose counts differ from `other`'s: `name before→after`.
        func threadChanges(since other: Resources) -> String {
            Set(threadNames.keys).union(other.threadNames.keys).sorted()
                .filter { threadNames[$0] != other.threadNames[$0] }
                .map { "\($0) \(other.threadNames[$0] ?? 0)→\(threadNames[$0] ?? 0)" }
                .joined(separator: ", ")
        }
    }

    var nearbyd = Resources()
    var server = Resources()
    /// Object paths nearbyd exports (`busctl tree`), its root included.
    var objects = 0
    /// Connections on the device's bus (unique names), nearbyd's and busctl's own included.
    var connections = 0
    /// Rows of nearbyd's outbox: messages waiting for their verdict…
    var outboxPending = 0
    /// …and verdicts waiting for their app to come back.
    var outboxVerdicts = 0
    var outbox: Int { outboxPending + outboxVerdicts }
    /// Permission decisions of every user (`ListPermissions` as root).
    var decisions = 0
    /// nearby-server's rows, by the names of ``serverQueries``.
    var rows: [String: Int] = [:]
    /// The size of nearby-server's database file and its write-ahead log.
    var databaseKiB = 0

    /// The server's rows that are counted, each with its query.
    static let serverQueries: KeyValuePairs<String, String> = [
        "device": "SELECT COUNT(*) FROM device",
        "token": "SELECT COUNT(*) FROM token",
        "publication": "SELECT COUNT(*) FROM publication",
        "subscription": "SELECT COUNT(*) FROM subscription",
        "upstream pending": "SELECT COUNT(*) FROM upstream WHERE verdict IS NULL",
        "upstream settled": "SELECT COUNT(*) FROM upstream WHERE verdict IS NOT NULL",
        "downstream": "SELECT COUNT(*) FROM downstream",
        "receipt": "SELECT COUNT(*) FROM receipt",
        "deletedDevice": "SELECT COUNT(*) FROM deletedDevice",
        // Rows of a device that no longer exists: none, if deleting a device takes everything of it along.
        "orphaned": """
            SELECT (SELECT COUNT(*) FROM token WHERE device NOT IN (SELECT id FROM device))
                 + (SELECT COUNT(*) FROM publication WHERE device NOT IN (SELECT id FROM device))
                 + (SELECT COUNT(*) FROM subscription WHERE device NOT IN (SELECT id FROM device))
                 + (SELECT COUNT(*) FROM upstream WHERE device NOT IN (SELECT id FROM device))
                 + (SELECT COUNT(*) FROM downstream WHERE device NOT IN (SELECT id FROM device))
            """,
    ]

    /// Takes every figure of `device`'s nearbyd and the cluster's server.
    static func take(_ cluster: Cluster, _ device: Cluster.Device) async throws -> Census {
        var census = Census()
        census.nearbyd = try resources(of: device.daemon.pid)
        census.server = try resources(of: cluster.serverPID)
        let address = "--address=\(device.busAddress)"
        census.objects = try await lines(of: "/usr/bin/busctl", [address, "tree", "--list", "org.nearbyd"])
            .filter { $0.hasPrefix("/") }.count
        census.connections = try await busctlData(address, ["org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                            "org.freedesktop.DBus", "ListNames"])
            .compactMap { $0 as? String }.filter { $0.hasPrefix(":") }.count
        census.decisions = try await busctlData(address, ["org.nearbyd", "/org/nearbyd", "org.nearbyd.Nearby1",
                                                          "ListPermissions", "a{sv}", "0"]).count
        let outbox = try await count(in: cluster.stateDirectory(of: device.name) + "/outbox.sqlite", [
            "pending": "SELECT COUNT(*) FROM outbox WHERE failure IS NULL AND succeeded = 0",
            "verdicts": "SELECT COUNT(*) FROM outbox WHERE NOT (failure IS NULL AND succeeded = 0)",
        ])
        census.outboxPending = outbox["pending"] ?? 0
        census.outboxVerdicts = outbox["verdicts"] ?? 0
        census.rows = try await count(in: cluster.serverDatabase, serverQueries)
        census.databaseKiB = try [cluster.serverDatabase, cluster.serverDatabase + "-wal"].map { path in
            FileManager.default.fileExists(atPath: path)
                ? (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0) / 1024 : 0
        }.reduce(0, +)
        return census
    }

    /// The devices registered with the server now.
    static func devices(_ cluster: Cluster) async throws -> [String] {
        try await lines(of: "/usr/bin/sqlite3", ["-readonly", "-batch", cluster.serverDatabase, "SELECT id FROM device"])
    }

    /// The live tokens of `devices` (hexadecimal), as devices hearing them would report them.
    static func liveTokens(_ cluster: Cluster, of devices: [String]) async throws -> [String] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        // Device ids are URL-safe base64: nothing in them needs quoting.
        let ids = devices.map { "'\($0)'" }.joined(separator: ",")
        return try await lines(of: "/usr/bin/sqlite3", [
            "-readonly", "-batch", cluster.serverDatabase,
            "SELECT lower(hex(token)) FROM token WHERE expiresAtMs > \(now) AND device IN (\(ids))",
        ])
    }

    static func resources(of pid: Int32) throws -> Resources {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) throws -> Int {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }),
                  let value = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap({ Int($0) })
            else { throw ChildProcessError(message: "no \(name) in /proc/\(pid)/status") }
            return value
        }
        var names: [String: Int] = [:]
        for task in try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") {
            // A thread may end between the listing and the read.
            if let name = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8) {
                names[name.trimmingCharacters(in: .whitespacesAndNewlines), default: 0] += 1
            }
        }
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")
        let sockets = Set(descriptors.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)") })
        return Resources(residentKiB: try field("VmRSS"), anonymousKiB: try field("RssAnon"), peakResidentKiB: try field("VmHWM"),
                         descriptors: descriptors.count,
                         tcpConnections: try established(in: pid).filter { sockets.contains("socket:[\($0)]") }.count,
                         threads: try field("Threads"), threadNames: names)
    }

    /// The inodes of the TCP sockets established in `pid`'s network namespace (/proc/PID/net/tcp and tcp6).
    private static func established(in pid: Int32) throws -> [String] {
        var inodes: [String] = []
        for table in ["tcp", "tcp6"] {
            let text = try String(contentsOfFile: "/proc/\(pid)/net/\(table)", encoding: .utf8)
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                // st 01: ESTABLISHED; the inode is the tenth field.
                if fields.count > 9 && fields[3] == "01" { inodes.append(String(fields[9])) }
            }
        }
        return inodes
    }

    /// Each query's single number, by name, from one sqlite3 run on `database`.
    private static func count(in database: String, _ queries: KeyValuePairs<String, String>) async throws -> [String: Int] {
        let script = queries.map { "SELECT '\($0.key)', (\($0.value));" }.joined(separator: "\n")
        var counts: [String: Int] = [:]
        for line in try await lines(of: "/usr/bin/sqlite3", ["-readonly", "-batch", database, script]) {
            let parts = line.split(separator: "|")
            if parts.count == 2, let value = Int(parts[1]) { counts[String(parts[0])] = value }
        }
        guard counts.count == queries.count else {
            throw ChildProcessError(message: "sqlite3 on \(database) answered \(counts) for \(queries.map(\.key))")
        }
        return counts
    }

    /// The first argument of a method's reply (`busctl --json=short call`).
    private static func busctlData(_ address: String, _ call: [String]) async throws -> [Any] {
        let output = try await lines(of: "/usr/bin/busctl", [address, "--json=short", "call"] + call).joined()
        guard let reply = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any],
              let data = reply["data"] as? [Any], let first = data.first as? [Any] else {
            throw ChildProcessError(message: "busctl call \(call.joined(separator: " ")): \(output)")
        }
        return first
    }

    private static func lines(of program: String, _ arguments: [String]) async throws -> [String] {
        let result = try await runProgram(program, arguments)
        guard result.status == 0 else {
            throw ChildProcessError(message: "\(program) \(arguments.joined(separator: " ")) failed: \(result.output)")
        }
        return result.output.split(separator: "\n").map(String.init)
    }
}
