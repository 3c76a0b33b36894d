import Foundation
import TestSupport

/// The Python load clients in bench/ (dbus-next and aiohttp on Debian's
/// Python), run by root or by another user. They are copied to a directory
/// everyone may read: the checkout may sit under one only its owner can enter.
struct LoadScripts: Sendable {
    /// Whose clients they are.
    enum User: String, Sendable, CaseIterable {
        /// root, the benchmark's own user (and so its probe's).
        case root
        /// nobody (65534): another user, with only what the shipped bus policy gives it.
        case nobody
    }

    private static let scripts = ["nearbyd_calls.py", "soak_clients.py", "soak_devices.py", "isolation_load.py",
                                         "server_load.py"]
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    /// The shipped D-Bus policy, which gives users other than root what a system bus would.
    static let busPolicy = root.appendingPathComponent("dbus-policy/org.nearbyd.conf").path

    private let directory: TemporaryDirectory

    init() throws {
        directory = try TemporaryDirectory("nearby-bench-load")
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        for script in Self.scripts {
            try FileManager.default.copyItem(atPath: Self.root.appendingPathComponent("bench/" + script).path,
                                             toPath: directory.file(script))
        }
    }

    /// Runs `body` on a cluster of `options` (the shipped bus policy given to
    /// other users) with the scripts ready; stops the cluster and removes the
    /// scripts afterwards, whatever `body` did.
    static func withCluster(_ options: Cluster.Options,
                            _ body: (Cluster, LoadScripts) async throws -> Void) async throws {
        let cluster = try await Cluster(options: options)
        let scripts: LoadScripts
        do {
            scripts = try LoadScripts()
        } catch {
            await cluster.stop()
            throw error
        }
        let outcome: Result<Void, any Error>
        do {
            outcome = .success(try await body(cluster, scripts))
        } catch {
            outcome = .failure(error)
        }
        await cluster.stop()
        scripts.remove()
        try outcome.get()
    }

    /// Starts `script` with `arguments` as `user`; with `takesInput`, its
    /// standard input is fed by the process's `send(_:)` (a script driven by commands).
    func start(_ script: String, _ arguments: [String], as user: User, name: String, takesInput: Bool = false) async throws -> ChildProcess {
        let command = ["/usr/bin/python3", directory.file(script)] + arguments
        switch user {
        case .root:
            return try await ChildProcess(name: name, executable: command[0], arguments: Array(command.dropFirst()),
                                          takesInput: takesInput)
        case .nobody:
            // setpriv runs the script in its own process (runuser would stay
            // its parent), so a signal to the child's pid reaches the script.
            return try await ChildProcess(name: name, executable: "/usr/bin/setpriv",
                                          arguments: ["--reuid=65534", "--regid=65534", "--clear-groups", "--"] + command,
                                          environment: ["HOME": "/"], takesInput: takesInput)
        }
    }

    func remove() {
        directory.remove()
    }
}

/// The JSON object a load client printed on a line.
func jsonLine(_ line: String) throws -> [String: Any] {
    guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
        throw ChildProcessError(message: "not a JSON object: \(line)")
    }
    return object
}

/// Counts by name (a load client's "outcomes" or "counts"), added up over runs.
struct Tally: Sendable {
    private(set) var counts: [String: Int] = [:]

    mutating func add(_ object: Any?) {
        for (name, count) in object as? [String: Any] ?? [:] {
            counts[name, default: 0] += (count as? Int) ?? 0
        }
    }

    subscript(_ name: String) -> Int { counts[name] ?? 0 }

    /// Every count whose name ends with " ok": calls answered.
    var answered: Int { counts.filter { $0.key.hasSuffix(" ok") }.values.reduce(0, +) }

    /// The counts, as `name count, name count` in name order.
    var summary: String {
        counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}
