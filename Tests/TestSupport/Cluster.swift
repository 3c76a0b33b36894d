import Foundation
import Synchronization

/// A whole simulated world on one host, made of the real programs: one private
/// D-Bus per device (as on separate machines), nearby-server with its own
/// SQLite database, nearby-air, and one nearbyd per device attached to the air.
public final class Cluster: Sendable {
    /// One simulated device: its bus and its daemon.
    public struct Device: Sendable {
        public let name: String
        public let bus: PrivateBus
        public let daemon: ChildProcess

        /// The address clients of this device connect to.
        public var busAddress: String { bus.address }
    }

    /// Settings of every daemon (as `nearbyd.conf` lines) and of the server.
    public struct Options: Sendable {
        public var lostTimeout = 1.0
        public var refreshInterval = 0.5
        public var extraConfiguration = ""
        /// More lines of the daemons' `[server]` section.
        public var daemonServerSettings = ""
        /// URLs the daemons' `[server] url` lists before the cluster's server
        /// (replicas that are down, say); with none it is that server's URL alone.
        public var serverURLsBefore: [String] = []
        /// `nearby-server.conf` text.
        public var serverConfiguration = ""
        /// The daemons' `--log-level`: debug for tests (their output is shown
        /// when one fails), info for benchmarks (what a deployment runs).
        public var daemonLogLevel = "debug"
        /// Whether the server runs its XMPP endpoint for application servers
        /// (with a self-signed certificate made by `nearby-server certificate`).
        public var xmpp = false
        /// The daemons' `[permissions] default-policy`: grant, so that tests about
        /// something else need no agent; permission tests choose `ask` or `deny`.
        public var permissionPolicy = "grant"
        /// `[permissions] request-timeout`, seconds.
        public var permissionTimeout = 20.0
        /// `[daemon] logind-bus`: none (the host's logind is not the test's), or a
        /// private bus where python-dbusmock stands in for logind.
        public var logindBus = "none"
        /// The policy of each device's bus (by default, only root may connect and it may do anything).
        public var busPolicy = PrivateBus.Policy.open
        /// Whether the server serves its API over TLS (a self-signed
        /// certificate for localhost and 127.0.0.1, made by `nearby-server
        /// certificate`), and the daemons reach it over `https://`.
        public var tls = false
        /// With ``tls``: whether the daemons trust that certificate
        /// (`[server] ca-file`); without, they trust the system's CAs alone.
        public var daemonsTrustServer = true

        public init(lostTimeout: Double = 1.0, refreshInterval: Double = 0.5, extraConfiguration: String = "",
                    daemonServerSettings: String = "",
                    serverConfiguration: String = "", daemonLogLevel: String = "debug", xmpp: Bool = false,
                    permissionPolicy: String = "grant", permissionTimeout: Double = 20.0, logindBus: String = "none",
                    busPolicy: PrivateBus.Policy = .open, tls: Bool = false, daemonsTrustServer: Bool = true,
                    serverURLsBefore: [String] = []) {
            self.lostTimeout = lostTimeout
            self.refreshInterval = refreshInterval
            self.extraConfiguration = extraConfiguration
            self.daemonServerSettings = daemonServerSettings
            self.serverConfiguration = serverConfiguration
            self.daemonLogLevel = daemonLogLevel
            self.xmpp = xmpp
            self.permissionPolicy = permissionPolicy
            self.permissionTimeout = permissionTimeout
            self.logindBus = logindBus
            self.busPolicy = busPolicy
            self.tls = tls
            self.daemonsTrustServer = daemonsTrustServer
            self.serverURLsBefore = serverURLsBefore
        }
    }

    /// The XMPP domain of the cluster's server.
    public static let xmppDomain = "nearby.test"

    public let directory: TemporaryDirectory
    public let airSocket: String
    public let serverURL: String
    /// The XMPP endpoint's port, when ``Options/xmpp``.
    public let xmppPort: Int?
    /// The endpoint's certificate (PEM), which its clients trust.
    public var certificatePath: String { directory.file("xmpp.pem") }
    /// The API's certificate (PEM) with ``Options/tls``, which the daemons trust.
    public var apiCertificatePath: String { directory.file("api.pem") }
    private let port: Int
    private let air: ChildProcess
    private let serverProcess: Mutex<ChildProcess>
    private let devices: Mutex<[String: Device]>
    private let options: Options

    /// Starts the server and the air; devices are added with ``addDevice(_:at:)``.
    public init(options: Options = Options()) async throws {
        self.options = options
        directory = try TemporaryDirectory("nearbyd-cluster")
        airSocket = directory.file("air.sock")
        air = try await ChildProcess(name: "nearby-air", executable: Programs.path("nearby-air"),
                                     arguments: ["serve", "--socket", airSocket, "--interval", "0.05"])
        try await air.waitForLine(containing: "listening on")
        var serverConfiguration = options.serverConfiguration
        if options.tls {
            let made = try await runProgram(Programs.path("nearby-server"), [
                "certificate", "localhost", "--certificate", directory.file("api.pem"), "--private-key", directory.file("api.key"),
            ])
            guard made.status == 0 else { throw ChildProcessError(message: "nearby-server certificate failed: \(made.output)") }
            serverConfiguration = """
                [http]
                certificate = "\(directory.file("api.pem"))"
                private-key = "\(directory.file("api.key"))"

                """ + serverConfiguration
        }
        if options.xmpp {
            let made = try await runProgram(Programs.path("nearby-server"), [
                "certificate", Self.xmppDomain, "--certificate", directory.file("xmpp.pem"),
                "--private-key", directory.file("xmpp.key"),
            ])
            guard made.status == 0 else { throw ChildProcessError(message: "nearby-server certificate failed: \(made.output)") }
            serverConfiguration += """

                [xmpp]
                domain = "\(Self.xmppDomain)"
                certificate = "\(directory.file("xmpp.pem"))"
                private-key = "\(directory.file("xmpp.key"))"

                """
        }
        _ = try directory.write("server.conf", serverConfiguration)
        let server = try await Self.startServer(directory: directory, listen: "127.0.0.1:0", xmppListen: options.xmpp ? "127.0.0.1:0" : nil)
        let line = try await server.waitForLine(containing: "nearby-server: listening on ")
        let listening = String(line[line.range(of: "nearby-server: listening on ")!.upperBound...]).trimmingCharacters(in: .whitespaces)
        // Over TLS by the name its certificate gives (an address may not be checked: DaemonConfiguration).
        serverURL = options.tls ? listening.replacingOccurrences(of: "https://127.0.0.1:", with: "https://localhost:") : listening
        port = Int(serverURL.split(separator: ":").last ?? "") ?? 0
        if options.xmpp {
            let xmppLine = try await server.waitForLine(containing: "xmpp on ")
            xmppPort = Int(xmppLine.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "")
        } else {
            xmppPort = nil
        }
        serverProcess = Mutex(server)
        devices = Mutex([:])
    }

    /// A project's keys, as `nearby-server project create` prints them.
    public struct ProjectKeys: Sendable {
        public let apiKey: String
        /// The password of its application servers on the XMPP endpoint.
        public let serverKey: String
    }

    /// Creates a project on the server and returns its keys.
    public func createProjectKeys(_ name: String) async throws -> ProjectKeys {
        let result = try await runProgram(Programs.path("nearby-server"),
                                          ["project", "create", name, "--database", directory.file("server.sqlite"), "--json"])
        guard result.status == 0, let data = result.output.data(using: .utf8),
              let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
              let apiKey = object["apiKey"] as? String, let serverKey = object["serverKey"] as? String else {
            throw ChildProcessError(message: "project create failed: \(result.output)")
        }
        return ProjectKeys(apiKey: apiKey, serverKey: serverKey)
    }

    /// Creates a project on the server and returns its API key.
    public func createProject(_ name: String) async throws -> String {
        try await createProjectKeys(name).apiKey
    }

    /// Starts a device: a private bus and a nearbyd on it, attached to the air at
    /// (x, y). `ble` is the daemon's `[ble]` section (by default, nearby-air).
    @discardableResult
    public func addDevice(_ name: String, at position: (Double, Double) = (0, 0),
                          ble: String = "backend = \"sim\"") async throws -> Device {
        let bus = try await PrivateBus(policy: options.busPolicy)
        let configuration = try directory.write("\(name).conf", """
            [daemon]
            logind-bus = "\(options.logindBus)"

            [permissions]
            default-policy = "\(options.permissionPolicy)"
            request-timeout = \(options.permissionTimeout)

            [publications]
            directory = "\(directory.file("publications-\(name)"))"

            [server]
            url = \(daemonServerURLs)
            reconnect-initial-delay = 0.05
            reconnect-max-delay = 0.5
            request-timeout = 5
            \(options.tls && options.daemonsTrustServer ? "ca-file = \"\(apiCertificatePath)\"" : "")
            \(options.daemonServerSettings)

            [discovery]
            lost-timeout = \(options.lostTimeout)
            refresh-interval = \(options.refreshInterval)

            [ble]
            \(ble)

            [sim]
            air-socket = "\(airSocket)"
            device = "\(name)"
            position = [\(position.0), \(position.1)]
            \(options.extraConfiguration)
            """)
        let device = Device(name: name, bus: bus, daemon: try await startDaemon(name, bus: bus, configuration: configuration))
        devices.withLock { $0[name] = device }
        return device
    }

    /// Kills a device's nearbyd outright (SIGKILL, as a crash would) and starts
    /// it again on the same bus, configuration and state directory.
    @discardableResult
    public func restartDaemon(_ name: String) async throws -> Device {
        try await killDaemon(name)
        return try await startDaemonAgain(name)
    }

    /// Kills a device's nearbyd outright (SIGKILL, as a crash would) and waits for it to exit.
    public func killDaemon(_ name: String) async throws {
        guard let old = device(name) else { throw ChildProcessError(message: "no device \(name)") }
        old.daemon.signal(SIGKILL)
        _ = try await old.daemon.waitForExit()
    }

    /// Starts a killed device's nearbyd again on the same bus, configuration and state directory.
    @discardableResult
    public func startDaemonAgain(_ name: String) async throws -> Device {
        guard let old = device(name) else { throw ChildProcessError(message: "no device \(name)") }
        let device = Device(name: name, bus: old.bus,
                            daemon: try await startDaemon(name, bus: old.bus, configuration: directory.file("\(name).conf")))
        devices.withLock { $0[name] = device }
        return device
    }

    /// The daemons' `[server] url`: the cluster's server, after ``Options/serverURLsBefore``.
    private var daemonServerURLs: String {
        let urls = options.serverURLsBefore + [serverURL]
        return urls.count == 1 ? "\"\(serverURL)\"" : "[" + urls.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
    }

    private func startDaemon(_ name: String, bus: PrivateBus, configuration: String) async throws -> ChildProcess {
        let daemon = try await ChildProcess(
            name: "nearbyd-\(name)", executable: Programs.path("nearbyd"),
            arguments: ["--bus", bus.address, "--config", configuration, "--state-dir", directory.file("state-\(name)"),
                        "--log-level", options.daemonLogLevel])
        try await daemon.waitForLine(containing: "nearbyd: ready")
        return daemon
    }

    public func device(_ name: String) -> Device? {
        devices.withLock { $0[name] }
    }

    /// Moves a device in the air (`nearby-air move`).
    public func move(_ name: String, to position: (Double, Double)) async throws {
        let result = try await runProgram(Programs.path("nearby-air"),
                                          ["move", "--socket", airSocket, name, "\(position.0)", "\(position.1)"])
        guard result.status == 0 else { throw ChildProcessError(message: "move failed: \(result.output)") }
    }

    /// Runs `nearby-server ARGUMENTS --database` on the cluster's database
    /// (the beacon registry's commands); returns what it printed.
    @discardableResult
    public func serverCommand(_ arguments: [String]) async throws -> String {
        let result = try await runProgram(Programs.path("nearby-server"), arguments + ["--database", directory.file("server.sqlite")])
        guard result.status == 0 else {
            throw ChildProcessError(message: "nearby-server \(arguments.joined(separator: " ")) failed: \(result.output)")
        }
        return result.output
    }

    /// Places (or moves and reprograms) a simulated beacon (`nearby-air beacon add`).
    public func placeBeacon(_ name: String, _ kind: String, _ id: String, at position: (Double, Double),
                            txPower: Int = -59) async throws {
        let result = try await runProgram(Programs.path("nearby-air"), [
            "beacon", "add", "--socket", airSocket, name, kind, id, "--at", "\(position.0)", "\(position.1)",
            "--tx-power", "\(txPower)",
        ])
        guard result.status == 0 else { throw ChildProcessError(message: "beacon add failed: \(result.output)") }
    }

    /// The process id of nearby-server now (it changes when restarted).
    public var serverPID: Int32 { serverProcess.withLock { $0.pid } }

    /// The server's SQLite database.
    public var serverDatabase: String { directory.file("server.sqlite") }

    /// The state directory of a device's nearbyd (`--state-dir`).
    public func stateDirectory(of name: String) -> String { directory.file("state-\(name)") }

    /// Kills the server outright (SIGKILL), as a crash would.
    public func killServer() async {
        let server = serverProcess.withLock { $0 }
        server.signal(SIGKILL)
        _ = try? await server.waitForExit()
    }

    /// Starts the server again on the same ports and database.
    public func restartServer() async throws {
        let server = try await Self.startServer(directory: directory, listen: "127.0.0.1:\(port)",
                                                xmppListen: xmppPort.map { "127.0.0.1:\($0)" })
        try await server.waitForLine(containing: "nearby-server: listening on ")
        if xmppPort != nil { try await server.waitForLine(containing: "xmpp on ") }
        serverProcess.withLock { $0 = server }
    }

    /// Sends the server SIGTERM and waits up to `within` seconds for it to
    /// exit: its exit status and how long it took.
    public func terminateServer(within seconds: Double = 30) async throws -> (status: Int32, seconds: Double) {
        let server = serverProcess.withLock { $0 }
        let start = ContinuousClock.now
        server.signal(SIGTERM)
        let status = try await server.waitForExit(within: seconds)
        let took = ContinuousClock.now - start
        return (status, Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18)
    }

    /// Stops the server gracefully (SIGTERM) and waits for it to exit.
    public func stopServer() async {
        await serverProcess.withLock { $0 }.stop()
    }

    /// Everything the programs printed, for a failing test's report.
    public var logs: String {
        var parts = ["--- nearby-server ---\n" + serverProcess.withLock { $0.output }, "--- nearby-air ---\n" + air.output]
        for device in devices.withLock({ Array($0.values) }).sorted(by: { $0.name < $1.name }) {
            parts.append("--- nearbyd \(device.name) ---\n" + device.daemon.output)
        }
        return parts.joined(separator: "\n")
    }

    /// Stops every process the cluster started and removes its files.
    public func stop() async {
        for device in devices.withLock({ Array($0.values) }) {
            await device.daemon.stop()
            await device.bus.stop()
        }
        await serverProcess.withLock { $0 }.stop()
        await air.stop()
        directory.remove()
    }

    private static func startServer(directory: TemporaryDirectory, listen: String, xmppListen: String?) async throws -> ChildProcess {
        try await ChildProcess(name: "nearby-server", executable: Programs.path("nearby-server"),
                               arguments: ["serve", "--listen", listen, "--database", directory.file("server.sqlite"),
                                           "--config", directory.file("server.conf"), "--log-level", "debug"]
                                   + (xmppListen.map { ["--xmpp-listen", $0] } ?? []))
    }
}
