import Foundation

/// A throwaway PostgreSQL cluster for tests: `initdb` in a temporary
/// directory, a server listening only on a unix socket in that directory, a
/// superuser `nearby` who needs no password. Run as root (as CI runs the
/// tests), PostgreSQL's programs refuse to start: they run as `nobody` then,
/// in a directory that user owns. ``stop()`` kills the server and removes the
/// directory; it must be called however the tests end. A test process killed
/// outright (a `timeout`, SIGKILL) cannot call it: the next cluster started
/// stops and removes the clusters whose test process is gone.
public final class PostgresCluster: Sendable {
    /// The cluster's directory: its data, its log and its socket.
    public let directory: String
    /// The role every database of the cluster is opened as (no password: trust).
    public let superuser = "nearby"
    private let bin: String
    /// What runs a PostgreSQL program as the cluster's owner: setpriv when the tests run as root.
    private let owner: [String]
    /// Whether commits reach the disk (fsync on), as in production.
    private let durable: Bool

    /// Creates and starts a cluster; each step has a deadline. Tests keep
    /// `durable` off: their data is thrown away, and syncing it would only
    /// slow them. Benchmarks turn it on, so that what they measure is what a
    /// deployment pays for each commit.
    public static func start(durable: Bool = false) async throws -> PostgresCluster {
        let bin = try binaries()
        await removeOrphans(bin: bin)
        var template = Array("\(FileManager.default.temporaryDirectory.path)/\(prefix)XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw ClusterError("cannot create a temporary directory: \(String(cString: strerror(errno)))") }
        let directory = String(cString: made)
        // Whose cluster it is, for removeOrphans.
        guard FileManager.default.createFile(atPath: "\(directory)/\(ownerFile)", contents: Data("\(getpid())\n".utf8)) else {
            try? FileManager.default.removeItem(atPath: directory)
            throw ClusterError("cannot write \(directory)/\(ownerFile)")
        }
        var owner: [String] = []
        if getuid() == 0 {
            guard let nobody = getpwnam("nobody") else {
                try? FileManager.default.removeItem(atPath: directory)
                throw ClusterError("running as root, and there is no user nobody to run PostgreSQL as")
            }
            guard chown(directory, nobody.pointee.pw_uid, nobody.pointee.pw_gid) == 0 else {
                let reason = String(cString: strerror(errno))
                try? FileManager.default.removeItem(atPath: directory)
                throw ClusterError("cannot give \(directory) to nobody: \(reason)")
            }
            owner = asOwner(uid: nobody.pointee.pw_uid)
        }
        let cluster = PostgresCluster(directory: directory, bin: bin, owner: owner, durable: durable)
        do {
            // Throwaway data: no fsync. The default collation is ICU's root
            // locale, as a production database's usually is a language's,
            // not byte order: the engine must ask for byte order (COLLATE
            // "C") where it sorts as SQLite does, and the tests can tell.
            try await cluster.run("initdb", ["-D", cluster.data, "-U", cluster.superuser, "-A", "trust", "-E", "UTF8", "--locale=C",
                                             "--locale-provider=icu", "--icu-locale=und", "--no-sync"], within: 120)
            try await cluster.startServer()
        } catch {
            await cluster.stop()
            throw error
        }
        return cluster
    }

    private static let prefix = "nearby-pg."
    private static let ownerFile = "test-process.pid"

    /// Stops and removes the clusters in the temporary directory whose test
    /// process no longer runs.
    private static func removeOrphans(bin: String) async {
        let temporary = FileManager.default.temporaryDirectory.path
        let names = (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []
        for name in names where name.hasPrefix(prefix) {
            let directory = "\(temporary)/\(name)"
            guard let text = try? String(contentsOfFile: "\(directory)/\(ownerFile)", encoding: .utf8),
                  let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)),
                  kill(pid, 0) != 0, errno == ESRCH else { continue }
            let stat = (try? FileManager.default.attributesOfItem(atPath: directory)) ?? [:]
            let owner = (stat[.ownerAccountID] as? NSNumber)?.uint32Value ?? getuid()
            let orphan = PostgresCluster(directory: directory, bin: bin, owner: asOwner(uid: owner), durable: false)
            if orphan.postmasterRuns {
                await orphan.stop()
            } else {
                // A postmaster.pid whose process is gone (or is another's now)
                // must not be signalled: the directory alone goes.
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
    }

    /// Whether the pid of the data directory's postmaster.pid is a running
    /// server of this directory (its working directory is the data
    /// directory), not a pid reused by another process.
    private var postmasterRuns: Bool {
        guard let text = try? String(contentsOfFile: "\(data)/postmaster.pid", encoding: .utf8),
              let line = text.split(separator: "\n").first, let pid = Int32(line.trimmingCharacters(in: .whitespaces)),
              let cwd = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/cwd") else { return false }
        return URL(fileURLWithPath: cwd).standardizedFileURL.path == URL(fileURLWithPath: data).standardizedFileURL.path
    }

    /// The command prefix that runs a program as `uid` (nothing when that is us).
    private static func asOwner(uid: uid_t) -> [String] {
        guard uid != getuid(), let user = getpwuid(uid) else { return [] }
        return ["/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(user.pointee.pw_gid)", "--clear-groups"]
    }

    private init(directory: String, bin: String, owner: [String], durable: Bool) {
        self.directory = directory
        self.bin = bin
        self.owner = owner
        self.durable = durable
    }

    /// The path of one of PostgreSQL's programs of the cluster's version (`pgbench`, `psql`).
    public func program(_ name: String) -> String {
        "\(bin)/\(name)"
    }

    /// The process id of the cluster's server (the postmaster), nil when it is not running.
    public var serverPID: Int32? {
        guard postmasterRuns, let text = try? String(contentsOfFile: "\(data)/postmaster.pid", encoding: .utf8),
              let line = text.split(separator: "\n").first else { return nil }
        return Int32(line.trimmingCharacters(in: .whitespaces))
    }

    private var data: String { "\(directory)/data" }

    /// The URL of a new, empty database of the cluster (over its socket).
    public func createDatabase() async throws -> String {
        let name = "test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        try await run("createdb", ["-h", directory, "-U", superuser, name], within: 60)
        return "postgres://\(superuser)@/\(name)?host=\(directory)"
    }

    /// Starts the server on the cluster's data (again, after ``stopServer()``).
    public func startServer() async throws {
        // Only the socket, in the cluster's own directory: nothing else on
        // the machine can reach it, and clusters of parallel test runs
        // cannot collide on a port.
        try await run("pg_ctl", ["-D", data, "-l", "\(directory)/server.log", "-w", "-t", "60", "-o",
                                 "-c listen_addresses='' -k \(directory) -c fsync=\(durable ? "on" : "off") -c max_connections=200",
                                 "start"], within: 90)
    }

    /// Stops the server and keeps its data, as an operator's restart does;
    /// its clients' connections end.
    public func stopServer() async throws {
        try await run("pg_ctl", ["-D", data, "-m", "fast", "-w", "-t", "30", "stop"], within: 45)
    }

    /// Adds a superuser `role` who must give `password` (SCRAM), as a
    /// production database's role must; the server is restarted to read the
    /// rule, so that it holds once this returns. Other roles still need none.
    public func addPasswordRole(_ role: String, password: String) async throws {
        try await run("psql", ["-h", directory, "-U", superuser, "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c",
                               "SET password_encryption = 'scram-sha-256'; CREATE ROLE \(role) LOGIN SUPERUSER PASSWORD '\(password)'"],
                      within: 60)
        try await stopServer()
        let rules = "\(data)/pg_hba.conf"
        let existing = try String(contentsOfFile: rules, encoding: .utf8)
        try "local all \(role) scram-sha-256\n\(existing)".write(toFile: rules, atomically: false, encoding: .utf8)
        try await startServer()
    }

    /// Kills the server (immediate: the data is thrown away) and removes the directory.
    public func stop() async {
        if FileManager.default.fileExists(atPath: "\(data)/postmaster.pid") {
            _ = try? await run("pg_ctl", ["-D", data, "-m", "immediate", "-w", "-t", "30", "stop"], within: 45)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs one of PostgreSQL's programs as the cluster's owner; throws with its output when it fails.
    private func run(_ program: String, _ arguments: [String], within seconds: Double) async throws {
        let command = owner + ["\(bin)/\(program)"] + arguments
        let result = try await withTimeout(seconds, program) {
            try await runProgram(command[0], Array(command.dropFirst()))
        }
        guard result.status == 0 else {
            let log = (try? String(contentsOfFile: "\(directory)/server.log", encoding: .utf8)) ?? ""
            throw ClusterError("\(program) exited with \(result.status): \(result.output)\(log.isEmpty ? "" : "\nserver log:\n\(log)")")
        }
    }

    /// The directory of initdb and pg_ctl: the newest of Debian's /usr/lib/postgresql/*/bin, or where a build from source or
    /// another distribution puts them.
    private static func binaries() throws -> String {
        let debian = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: debian)) ?? []).compactMap(Int.init).sorted(by: >)
        for version in versions where FileManager.default.isExecutableFile(atPath: "\(debian)/\(version)/bin/initdb") {
            return "\(debian)/\(version)/bin"
        }
        for directory in ["/usr/local/pgsql/bin", "/usr/bin"] where FileManager.default.isExecutableFile(atPath: "\(directory)/initdb") {
            return directory
        }
        throw ClusterError("no PostgreSQL server programs (initdb) in \(debian)/*/bin: install postgresql (make setup)")
    }
}

/// Why a throwaway cluster could not be made.
public struct ClusterError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
