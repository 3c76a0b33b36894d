import Foundation
import TestSupport
import Testing

/// The real `nearby-server` executable, serving a fresh database in
/// `directory` on a free port, optionally under a descriptor limit (prlimit,
/// as systemd's LimitNOFILE= sets it). Stopped with SIGTERM by ``stop()``,
/// killed at the latest when the object goes.
struct ServerProcess {
    let process: ChildProcess
    let port: Int
    let databasePath: String
    /// `http`, or `https` when `[http]` has a certificate.
    let scheme: String

    /// `configuration` is TOML for the file besides `[http] listen` and `[database]`, each section once;
    /// `database` a PostgreSQL URL to serve instead of a new SQLite file;
    /// `descriptors` the soft and hard descriptor limit, `hardDescriptors` a higher hard one;
    /// `logLevel` the `--log-level` (the default's is info).
    static func start(in directory: URL, http: String = "", database: String? = nil, configuration: String = "",
                      descriptors: Int? = nil, hardDescriptors: Int? = nil, logLevel: String? = nil) async throws -> ServerProcess {
        let config = directory.appendingPathComponent("nearby-server.conf")
        let databasePath = directory.appendingPathComponent("nearby.sqlite").path
        try """
            [http]
            listen = "127.0.0.1:0"
            \(http)
            [database]
            \(database.map { "url = \"\($0)\"" } ?? "path = \"\(databasePath)\"")
            \(configuration)
            """.write(to: config, atomically: true, encoding: .utf8)
        let serve = [executable!.path, "serve", "--config", config.path] + (logLevel.map { ["--log-level", $0] } ?? [])
        let process = try await ChildProcess(
            name: "nearby-server",
            executable: descriptors == nil ? executable!.path : "/usr/bin/prlimit",
            arguments: descriptors.map { ["--nofile=\($0):\(hardDescriptors ?? $0)", "--"] + serve } ?? Array(serve.dropFirst()))
        let line = try await process.waitForLine(containing: "nearby-server: listening on ")
        let port = try #require(Int(line.split(separator: ":").last ?? ""))
        let scheme = line.contains("listening on https://") ? "https" : "http"
        return ServerProcess(process: process, port: port, databasePath: databasePath, scheme: scheme)
    }

    var baseURL: String { "\(scheme)://127.0.0.1:\(port)" }

    /// The most memory the process has had resident so far (VmHWM), in bytes.
    var peakResidentBytes: Int {
        get throws {
            let status = try String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8)
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
            return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])) * 1024
        }
    }

    func stop() async {
        await process.stop()
    }
}
