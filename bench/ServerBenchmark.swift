import Foundation
import Synchronization
import TestSupport

/// nearby-server under load: real server processes, on SQLite or on a
/// throwaway PostgreSQL cluster with one replica, then two and three, under the
/// default `[http]` limits, driven by simulated devices that speak the device
/// API directly (nearby-load on SwiftNIO, a few processes) and by one
/// application server on the XMPP endpoint. Each figure comes with a floor
/// measured in the same run: the same server's `GET /v1/health` under the
/// same generator, the application server's dry runs, and the engine's own
/// commit and NOTIFY costs.
enum ServerBenchmark {
    /// The figures a run measures.
    enum Part: String, Sendable, CaseIterable {
        /// The streams held, and the memory they take.
        case streams
        /// Sighting reports at saturation, found latency at half that rate (on open streams), and
        /// CPU per report at one rate every deployment sustains.
        case sightings
        /// Upstream messages from devices' channels through one application server.
        case upstream
    }

    struct Settings: Sendable {
        /// Deployments to measure.
        var sqlite = true
        var postgres = true
        var parts = Set(Part.allCases)
        /// Devices that publish, subscribe and move (report sightings), in all.
        var devices = 2_000
        /// Streams held at once in all, the moving devices' included; the rest are devices that only hold a stream.
        var streams = 10_000
        /// Generator processes.
        var processes = 2
        /// Requests in flight at saturation, over all the generator's processes.
        var concurrency = 64
        /// Tokens each moving device hears at once.
        var neighbours = 4
        /// Seconds of each measured window, and of the warm-up before it.
        var seconds = 10.0
        var warmUp = 2.0
        /// Devices that open their channel and send upstream messages (the first moving ones).
        var upstreamDevices = 1_000
        /// Upstream messages each of them keeps out at once.
        var upstreamInFlight = 2
        /// XMPP sessions of the application server.
        var upstreamSessions = 4
        var seed = 1
        /// Reports a second, in all, of the window that measures CPU per report: the same for every
        /// deployment, below each one's saturation, so that the figures compare work and not contention.
        var costRate = 400.0
        /// PostgreSQL deployments of one replica up to this many.
        var replicas = 3

        /// Whether the streams are opened: for their own figure, and for the sightings' found and lost.
        var opensStreams: Bool { parts.contains(.streams) || parts.contains(.sightings) }
    }

    /// The XMPP domain of the servers' connection server, which its certificate names.
    static let xmppDomain = "nearby.bench"
    /// The project the devices and the application server belong to.
    static let project = "bench"

    /// One of the deployments measured.
    enum Deployment: Sendable, CustomStringConvertible {
        case sqlite
        case postgres(replicas: Int)

        var replicas: Int {
            if case .postgres(let replicas) = self { return replicas }
            return 1
        }

        var isPostgres: Bool {
            if case .postgres = self { return true }
            return false
        }

        var description: String {
            switch self {
            case .sqlite: "SQLite, one replica"
            case .postgres(let replicas): "PostgreSQL, \(replicas == 1 ? "one replica" : "\(replicas) replicas")"
            }
        }
    }

    static func run(_ settings: Settings) async throws {
        try checkDescriptors(settings)
        let scripts = try LoadScripts()
        var results: [DeploymentResult] = []
        var floor: PostgresFloor?
        var sqliteInserts: SQLiteFloor?
        try await ensuring {
            if settings.sqlite {
                if settings.parts.contains(.upstream) {
                    let seconds = min(settings.seconds, 5)
                    let floor = SQLiteFloor(normal: try await sqliteInsertRate(scripts, synchronous: "NORMAL", seconds: seconds),
                                            full: try await sqliteInsertRate(scripts, synchronous: "FULL", seconds: seconds))
                    sqliteInserts = floor
                    progress("server: SQLite floor: single-row inserts/s \(format(floor.full, 0)) (synchronous FULL, "
                             + "the server's), \(format(floor.normal, 0)) (NORMAL)")
                }
                results += try await measure([.sqlite], settings, scripts, cluster: nil)
            }
            if settings.postgres {
                let cluster = try await PostgresCluster.start(durable: true)
                try await ensuring {
                    floor = try await PostgresFloor.measure(cluster, scripts, seconds: min(settings.seconds, 5))
                    progress("server: PostgreSQL floor: \(floor!.summary)")
                    results += try await measure((1...settings.replicas).map { .postgres(replicas: $0) }, settings, scripts,
                                                 cluster: cluster)
                } finally: {
                    await cluster.stop()
                }
            }
        } finally: {
            scripts.remove()
        }
        print(report(results, floor: floor, sqliteInserts: sqliteInserts, settings))
    }

    // MARK: One deployment

    /// What one deployment measured.
    struct DeploymentResult: Sendable {
        let deployment: Deployment
        var setupSeconds = 0.0
        var streamsAsked = 0
        var streamsHeld = 0
        var streamOutcomes = Tally()
        var streamsPerReplica: [Int] = []
        var residentBeforeKiB: [Int] = []
        var residentAfterKiB: [Int] = []
        var health = Window()
        var sightings = Window()
        var healthPaced = Window()
        var sightingsPaced = Window()
        /// Reports at `Settings.costRate`: CPU per report where no deployment is saturated.
        var sightingsAtCostRate = Window()
        /// The same `/v1/health` requests answered by nginx (``NginxFloor``) at the same concurrency.
        var nginxHealth = Window()
        /// The servers' CPU with the streams held and no request, over a window as long: what a report's
        /// marginal cost is measured above.
        var idle = CPUShares()

        /// Each replica's CPU per report of the deployment at `Settings.costRate`, above its idle CPU.
        var marginalMicrosecondsPerReport: [Double] {
            let window = sightingsAtCostRate
            return zip(window.cpu.servers, idle.servers).map { max($0 - $1, 0) / max(window.rate, 1) * 1e6 }
        }
        var upstream: UpstreamResult?
    }

    /// The upstream figure of one deployment.
    struct UpstreamResult: Sendable {
        /// Devices whose channel was open, each with `inFlight` messages out.
        var devices = 0
        var inFlight = 0
        /// Seconds until as many messages had their `sent` as were sent at first (nil: not within the bound).
        var warmUpSeconds: Double?
        /// The window: `requests` are `sent` events, `latencies` their send → `sent` times.
        var window = Window()
        /// Messages still without a verdict once sending stopped and the bound to wait for them passed.
        var left = 0
        /// Every message's outcome over the run, warm-up and drain included (`failed …`, lost channels).
        var outcomes = Tally()
        /// Upstream messages the application server acked over the run.
        var acked = 0
        /// The application server's own CPU in the window, as a share of one core: whether it could take more.
        var appServerCPU = 0.0
        /// The floor: downstream dry runs from the same application server, one at a time and 100 in flight.
        var dryRunRTT: [Double] = []
        var dryRunRate = 0.0
        /// The same dry runs from slixmpp (bench/ccs_appserver.py), when measured.
        var slixmppDryRunRate: Double?
    }

    /// One measured window of the load: what the generator counted and the CPU each party used meanwhile.
    struct Window: Sendable {
        var requests = 0
        var seconds = 0.0
        var outcomes = Tally()
        /// Stream events (found, lost) the devices received in the window.
        var events = Tally()
        var latencies: [Double] = []
        var found: [Double] = []
        /// Founds still awaited when the window ended.
        var unanswered = 0
        var cpu = CPUShares()

        var rate: Double { seconds > 0 ? Double(requests) / seconds : 0 }
        /// Requests not answered 200 (errors, and sends skipped for want of a free device).
        var failed: Int { outcomes.counts.filter { $0.key != "200" }.values.reduce(0, +) }
    }

    /// Seconds of CPU per second of wall time, by party.
    struct CPUShares: Sendable {
        var servers: [Double] = []
        var postgres = 0.0
        var generator = 0.0
    }

    /// Runs every figure on each deployment of one engine, on one database:
    /// the generator's devices are registered once (through the first
    /// deployment's servers), then each deployment's servers are started
    /// afresh on that database (devices and their objects are stored; edges,
    /// matches, streams and channels are not) and measured in turn. With
    /// `cluster`, PostgreSQL; else a new SQLite file.
    private static func measure(_ deployments: [Deployment], _ settings: Settings, _ scripts: LoadScripts,
                                cluster: PostgresCluster?) async throws -> [DeploymentResult] {
        let directory = try TemporaryDirectory("nearby-bench-server")
        var replicas: [Replica] = []
        var workers: LoadWorkers?
        var results: [DeploymentResult] = []
        try await ensuring {
            let database = try await cluster?.createDatabase() ?? directory.file("server.sqlite")
            let keys = try await createProject(database: database)
            let xmpp = try await XMPPFiles.make(in: directory)
            func start(_ deployment: Deployment) async throws {
                progress("server: \(deployment): starting")
                for replica in replicas { await replica.process.stop() }
                replicas = []
                for index in 0..<deployment.replicas {
                    replicas.append(try await Replica.start("nearby-server-\(index + 1)", in: directory, database: database,
                                                            configuration: configuration(xmpp)))
                }
                if cluster != nil { try await evenPartitions(database: database, among: replicas.count) }
            }
            try await start(deployments[0])
            let load = try await LoadWorkers.start(settings, urls: replicas.map(\.url), apiKey: keys.apiKey)
            workers = load

            let setup = try await load.command(["do": "setup"], within: 900)
            let setupSeconds = setup.map { $0.double("seconds") }.max() ?? 0
            let failed = setup.map { $0.int("failed") }.reduce(0, +)
            guard failed == 0, let device = setup.lazy.compactMap({ $0["device"] as? String }).first else {
                var counts = Tally()
                setup.forEach { counts.add($0["counts"]) }
                throw ChildProcessError(message: "\(failed) devices could not be set up: \(counts.summary)")
            }
            progress("server: \(deployments[0]): \(settings.streams) devices registered in \(format(setupSeconds)) s")
            let upstream = UpstreamSetup(scripts: scripts, keys: keys, xmpp: xmpp, device: device)
            for (index, deployment) in deployments.enumerated() {
                if index > 0 {
                    _ = try await load.command(["do": "close"], within: 120)
                    try await start(deployment)
                    _ = try await load.command(["do": "urls", "urls": replicas.map(\.url)], within: 30)
                }
                var result = try await measure(deployment, on: replicas, load, settings, cluster: cluster,
                                               upstream: settings.parts.contains(.upstream) ? upstream : nil,
                                               slixmpp: index == 0 && cluster == nil)
                result.setupSeconds = setupSeconds
                results.append(result)
            }
        } finally: {
            if let workers { await workers.stop() }
            for replica in replicas { await replica.process.stop() }
            directory.remove()
        }
        return results
    }

    /// What the upstream figure needs besides the deployment: the project's
    /// keys, the XMPP endpoint's certificate, a registered device for dry runs.
    private struct UpstreamSetup: Sendable {
        let scripts: LoadScripts
        let keys: ProjectKeys
        let xmpp: XMPPFiles
        let device: String
    }

    /// Returns once `count` replicas of `database` share the 256 partitions
    /// evenly, as `nearby-server replicas` lists them: the devices are then
    /// each served by one replica for the whole run, as in a deployment
    /// whose replicas have been up a while.
    private static func evenPartitions(database: String, among count: Int) async throws {
        struct Status: Decodable {
            struct Replica: Decodable { var partitions: Int }
            var replicas: [Replica]
            var unowned: Int
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while true {
            let listed = try await runProgram(Programs.path("nearby-server"), ["replicas", "--database", database, "--json"])
            if let status = try? JSONDecoder().decode(Status.self, from: Data(listed.output.utf8)),
               status.replicas.count == count, status.unowned == 0,
               let most = status.replicas.map(\.partitions).max(), let least = status.replicas.map(\.partitions).min(), most - least <= 1 {
                // Each replica routes by what its own last round saw, a third of `lease-seconds` (10 s) at most
                // behind the database: after 4 s every replica has had a round since, and sends each device where
                // the others do.
                try await Task.sleep(for: .seconds(4))
                return
            }
            guard ContinuousClock.now < deadline else {
                throw ChildProcessError(message: "\(count) replicas did not share the partitions evenly within 120 s: \(listed.output)")
            }
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    /// The figures of one deployment, whose `replicas` were just started and
    /// whose devices are registered, with no stream open; with `upstream`,
    /// the upstream figure too (with `slixmpp`, also slixmpp's dry-run rate).
    private static func measure(_ deployment: Deployment, on replicas: [Replica], _ load: LoadWorkers, _ settings: Settings,
                                cluster: PostgresCluster?, upstream: UpstreamSetup?, slixmpp: Bool) async throws -> DeploymentResult {
        var result = DeploymentResult(deployment: deployment)
        if settings.opensStreams {
            try await measureStreams(&result, on: replicas, load, settings, cluster: cluster)
        }
        if let upstream {
            result.upstream = try await measureUpstream(deployment, on: replicas, load, settings, cluster: cluster, upstream,
                                                        slixmpp: slixmpp)
        }
        return result
    }

    /// Figures 1 to 3: the streams held, sightings at saturation, found latency.
    private static func measureStreams(_ result: inout DeploymentResult, on replicas: [Replica], _ load: LoadWorkers,
                                       _ settings: Settings, cluster: PostgresCluster?) async throws {
        let deployment = result.deployment
        // Figure 3: the streams, and the memory they take.
        result.residentBeforeKiB = try replicas.map { try Census.resources(of: $0.process.pid).residentKiB }
        let opened = try await load.command(["do": "open", "within": 300], within: 360)
        opened.forEach { result.streamOutcomes.add($0["outcomes"]) }
        let held = try await load.command(["do": "held"], within: 60)
        result.residentAfterKiB = try replicas.map { try Census.resources(of: $0.process.pid).residentKiB }
        result.streamsAsked = settings.streams
        result.streamsHeld = held.map { $0.int("open") }.reduce(0, +)
        result.streamsPerReplica = replicas.map { replica in
            held.map { ($0["by_url"] as? [String: Any])?[replica.url] as? Int ?? 0 }.reduce(0, +)
        }
        progress("server: \(deployment): \(result.streamsHeld) streams held (\(result.streamOutcomes.summary))")
        guard settings.parts.contains(.sightings) else { return }

        // Figure 1: saturation, against /v1/health under the same generator and concurrency.
        let meter = CPUMeter(servers: replicas.map(\.process.pid), postgres: cluster, generator: load.pids)
        let perProcess = max(1, settings.concurrency / settings.processes)
        result.health = try await load.window(["kind": "health", "concurrency": perProcess], settings, meter)
        // The HTTP floor's floor: the same requests of the same generator answered by nginx, one process.
        let nginx = try await NginxFloor.start()
        try await ensuring {
            let nginxMeter = CPUMeter(servers: [nginx.process.pid], postgres: nil, generator: load.pids)
            result.nginxHealth = try await load.window(["kind": "health", "concurrency": perProcess, "url": nginx.url], settings,
                                                      nginxMeter)
        } finally: {
            await nginx.stop()
        }
        result.sightings = try await load.window(["kind": "sightings", "concurrency": perProcess], settings, meter)
        progress("server: \(deployment): \(format(result.sightings.rate, 0)) reports/s at saturation, "
                 + "\(format(result.health.rate, 0)) health requests/s")

        // Figure 2: found latency at half that rate, against /v1/health's latency at the same rate.
        let paced = result.sightings.rate / 2 / Double(settings.processes)
        result.healthPaced = try await load.window(["kind": "health", "rate": paced], settings, meter)
        result.sightingsPaced = try await load.window(["kind": "sightings", "rate": paced], settings, meter)
        let found = Sample(result.sightingsPaced.found)
        progress("server: \(deployment): found p50 \(format(found.p50, 2)) ms, p99 \(format(found.p99, 2)) ms "
                 + "at \(format(result.sightingsPaced.rate, 0)) reports/s")

        // Figure 1b: CPU per report at one rate for every deployment. At saturation two replicas share the two
        // cores with PostgreSQL and the generator, and contention (and smaller batches) inflates each one's
        // CPU per report; at a rate all sustain, CPU per report is the work an operator multiplies.
        // Held streams, lease rounds and timers cost CPU with no report at all: measured alone, and taken
        // off, so that what remains is what a report adds.
        let idleStart = meter.read()
        try await Task.sleep(for: .seconds(settings.seconds))
        result.idle = meter.shares(since: idleStart)
        let costRate = settings.costRate / Double(settings.processes)
        result.sightingsAtCostRate = try await load.window(["kind": "sightings", "rate": costRate], settings, meter)
        let perReport = result.marginalMicrosecondsPerReport.map { format($0, 0) }
        progress("server: \(deployment): idle \(result.idle.servers.map { format($0 * 100, 1) }.joined(separator: " + ")) % of a core; "
                 + "at \(format(result.sightingsAtCostRate.rate, 0)) reports/s, server CPU µs per report above idle "
                 + perReport.joined(separator: " + "))
    }

    /// The upstream figure: the first `upstreamDevices` moving devices open
    /// their channel (each on the replica its stream is on), one application
    /// server logs in to replica 1's XMPP endpoint and acks every message;
    /// first the floor (its dry runs), then every device keeps
    /// `upstreamInFlight` messages out, each answered by `sent`, a warm-up
    /// until as many messages have their `sent` as were sent at first, the
    /// window, and then no more sends until every message out has its verdict.
    private static func measureUpstream(_ deployment: Deployment, on replicas: [Replica], _ load: LoadWorkers, _ settings: Settings,
                                        cluster: PostgresCluster?, _ setup: UpstreamSetup, slixmpp: Bool) async throws -> UpstreamResult {
        var result = UpstreamResult(inFlight: settings.upstreamInFlight)
        let perProcess = (settings.upstreamDevices + settings.processes - 1) / settings.processes
        let opened = try await load.command(["do": "channels", "count": perProcess, "within": 120], within: 180)
        result.devices = opened.map { $0.int("open") }.reduce(0, +)
        guard let xmppPort = replicas[0].xmppPort else { throw ChildProcessError(message: "replica 1 has no XMPP endpoint") }
        let app = try await LoadWorkers.appServer(setup.scripts, port: xmppPort, files: setup.xmpp, serverKey: setup.keys.serverKey,
                                                     sessions: settings.upstreamSessions)
        try await ensuring {
            let floor = try await app.command(["do": "dry-run", "to": setup.device, "count": 5000, "window": 100,
                                               "one_at_a_time": 500, "within": 120], within: 180)[0]
            result.dryRunRTT = (floor["rtt_ms"] as? [Any] ?? []).compactMap { ($0 as? NSNumber)?.doubleValue }
            result.dryRunRate = floor.double("rate")
            if slixmpp {
                result.slixmppDryRunRate = try await slixmppDryRunRate(port: xmppPort, files: setup.xmpp, keys: setup.keys,
                                                                       device: setup.device)
            }
            progress("server: \(deployment): \(result.devices) channels open; application server dry runs "
                     + "\(format(result.dryRunRate, 0))/s (100 in flight), round trip p50 \(format(Sample(result.dryRunRTT).p50, 2)) ms"
                     + (result.slixmppDryRunRate.map { "; slixmpp's \(format($0, 0))/s" } ?? ""))

            let started = try await load.command(["do": "upstream-start", "in_flight": settings.upstreamInFlight,
                                                  "warmup": settings.warmUp, "within": 180], within: 240)
            if started.allSatisfy({ ($0["warmed"] as? Bool) == true }) {
                result.warmUpSeconds = started.map { $0.double("seconds") }.max()
            }
            let meter = CPUMeter(servers: replicas.map(\.process.pid), postgres: cluster, generator: load.pids + app.pids)
            let appBefore = cpuSeconds(of: app.pids[0])
            result.window = try await load.measured(["do": "upstream-window", "seconds": settings.seconds],
                                                    within: settings.seconds + 60, meter)
            result.appServerCPU = (cpuSeconds(of: app.pids[0]) - appBefore) / max(result.window.seconds, 0.001)
            let stopped = try await load.command(["do": "upstream-stop", "within": 120], within: 180)
            result.left = stopped.map { $0.int("left") }.reduce(0, +)
            stopped.forEach { result.outcomes.add($0["outcomes"]) }
            let acked = try await app.command(["do": "acked"], within: 30)[0]
            result.acked = acked.int("acked")
            // Nacks the application server was sent (BAD_ACK: an ack the server did not expect), messages
            // delivered to it again, and the stream ending.
            for (kind, count) in acked["payloads"] as? [String: Any] ?? [:]
            where kind.hasPrefix("nack") || kind == "upstream again" || kind == "stream ended" {
                result.outcomes.add(["application server: \(kind)": count])
            }
        } finally: {
            await app.stop()
        }
        _ = try await load.command(["do": "close-channels"], within: 120)
        let latency = Sample(result.window.latencies)
        progress("server: \(deployment): upstream \(format(result.window.rate, 0)) messages/s, p50 \(format(latency.p50, 1)) ms, "
                 + "p99 \(format(latency.p99, 1)) ms (\(result.outcomes.summary.isEmpty ? "none failed" : result.outcomes.summary); "
                 + "warm-up \(result.warmUpSeconds.map { format($0) + " s" } ?? "not finished"), \(result.left) left)")
        return result
    }

    /// bench/ccs_appserver.py (slixmpp, on the project's Python environment)
    /// sending the same dry runs, 100 in flight; nil when that environment has no slixmpp.
    private static func slixmppDryRunRate(port: Int, files: XMPPFiles, keys: ProjectKeys, device: String) async throws -> Double? {
        let python = LoadScripts.root.appendingPathComponent(".build/venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else { return nil }
        let result = try await withTimeout(120, "slixmpp's dry runs") {
            try await runProgram(python, [
                LoadScripts.root.appendingPathComponent("bench/ccs_appserver.py").path, "--port", "\(port)",
                "--jid", "\(project)@\(xmppDomain)", "--key", keys.serverKey, "--ca", files.certificate,
                "--dry-run-to", device, "--count", "5000", "--window", "100",
            ])
        }
        guard let rate = result.output.split(separator: "\n").first(where: { $0.hasPrefix("rate ") })?
            .split(separator: " ").last.flatMap({ Double($0) }) else {
            progress("server: slixmpp's dry runs gave no rate: \(result.output.suffix(300))")
            return nil
        }
        return rate
    }

    /// SQLite's commit floor: single-row inserts a second from one
    /// connection into a new file in WAL mode, on the file system the
    /// server's file is on (server_load.py sqlite-insert).
    struct SQLiteFloor: Sendable {
        /// With `synchronous = NORMAL` (GRDB's with WAL): a commit waits for no sync of the disk.
        var normal: Double
        /// With `synchronous = FULL`, as the server's connection has it: each commit synced to the disk.
        var full: Double
    }

    private static func sqliteInsertRate(_ scripts: LoadScripts, synchronous: String, seconds: Double) async throws -> Double {
        let directory = try TemporaryDirectory("nearby-bench-sqlite")
        defer { directory.remove() }
        let probe = try await scripts.start("server_load.py", [
            "sqlite-insert", "--path", directory.file("floor.sqlite"), "--seconds", "\(seconds)", "--synchronous", synchronous,
        ], as: .root, name: "sqlite-insert")
        let line = try await probe.waitForLine(containing: #"{"inserts_per_s": "#, within: seconds + 60)
        _ = try await probe.waitForExit()
        return try jsonLine(line).double("inserts_per_s")
    }

    /// The servers' configuration: the default `[http]` limits, the XMPP
    /// endpoint, and registration's rate limits raised: thousands of
    /// devices register within a minute from the generator's few addresses,
    /// which the defaults (10 a minute per address, 600 per project) are
    /// there to refuse.
    private static func configuration(_ xmpp: XMPPFiles) -> String {
        """
        [limits]
        registrations-per-address-per-minute = 60000
        registrations-per-project-per-minute = 600000

        [xmpp]
        domain = "\(xmppDomain)"
        certificate = "\(xmpp.certificate)"
        private-key = "\(xmpp.privateKey)"

        """
    }

    /// The server lowers its default `[http] max-connections` (16,384)
    /// when the hard descriptor limit is lower than its budget
    /// (DescriptorBudget), and would then refuse streams: say so before starting anything.
    private static func checkDescriptors(_ settings: Settings) throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        // [http] max-connections and [xmpp] max-connections and max-unauthenticated-connections, at their defaults.
        let needed = 16_384 + 1000 + 256 + 64 + 4 * ProcessInfo.processInfo.activeProcessorCount
        guard limit.rlim_max >= rlim_t(needed) else {
            throw ChildProcessError(message: "nearby-server's default connection limits need \(needed) file descriptors, "
                                    + "but the hard limit is \(limit.rlim_max): raise it (ulimit -Hn)")
        }
    }

    /// A project's keys, as `nearby-server project create --json` prints them.
    struct ProjectKeys: Sendable {
        let apiKey: String
        /// The application servers' password on the XMPP endpoint.
        let serverKey: String
    }

    private static func createProject(database: String) async throws -> ProjectKeys {
        let result = try await runProgram(Programs.path("nearby-server"),
                                          ["project", "create", project, "--database", database, "--json"])
        guard result.status == 0, let object = try? jsonLine(result.output), let apiKey = object["apiKey"] as? String,
              let serverKey = object["serverKey"] as? String else {
            throw ChildProcessError(message: "project create failed: \(result.output)")
        }
        return ProjectKeys(apiKey: apiKey, serverKey: serverKey)
    }
}

/// The XMPP endpoint's self-signed certificate and key (`nearby-server
/// certificate`), which the application server trusts as its CA.
private struct XMPPFiles: Sendable {
    let certificate: String
    let privateKey: String

    static func make(in directory: TemporaryDirectory) async throws -> XMPPFiles {
        let files = XMPPFiles(certificate: directory.file("xmpp.pem"), privateKey: directory.file("xmpp.key"))
        let made = try await runProgram(Programs.path("nearby-server"), [
            "certificate", ServerBenchmark.xmppDomain, "--certificate", files.certificate, "--private-key", files.privateKey,
        ])
        guard made.status == 0 else { throw ChildProcessError(message: "nearby-server certificate failed: \(made.output)") }
        return files
    }
}

/// One nearby-server process of a deployment.
private struct Replica: Sendable {
    let process: ChildProcess
    let url: String
    /// Its XMPP endpoint's port.
    let xmppPort: Int?

    /// Starts `nearby-server serve` on `database` (an SQLite file or a
    /// PostgreSQL URL) with `configuration`, at `info` as deployed, on free
    /// ports (the API's, and the XMPP endpoint's when configured).
    static func start(_ name: String, in directory: TemporaryDirectory, database: String, configuration: String) async throws -> Replica {
        let process = try await ChildProcess(name: name, executable: Programs.path("nearby-server"), arguments: [
            "serve", "--listen", "127.0.0.1:0", "--xmpp-listen", "127.0.0.1:0", "--database", database,
            "--config", try directory.write("\(name).conf", configuration), "--log-level", "info",
        ])
        let line = try await process.waitForLine(containing: "nearby-server: listening on ", within: 60)
        let url = line[line.range(of: "listening on ")!.upperBound...].trimmingCharacters(in: .whitespaces)
        var xmppPort: Int?
        if configuration.contains("[xmpp]") {
            let xmpp = try await process.waitForLine(containing: "nearby-server: xmpp on ", within: 30)
            xmppPort = Int(xmpp.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "")
        }
        return Replica(process: process, url: url, xmppPort: xmppPort)
    }
}

/// The generator's processes (nearby-load; or the application server,
/// server_load.py appserver), driven by commands on their standard input and
/// answering each with a line.
private final class LoadWorkers: Sendable {
    let processes: [ChildProcess]
    private let lastID = Mutex(0)

    var pids: [Int32] { processes.map(\.pid) }

    private init(processes: [ChildProcess]) {
        self.processes = processes
    }

    /// The generator's program, built beside nearby-bench (a dependency of its target).
    static var generator: String {
        let bench = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bench).deletingLastPathComponent().appendingPathComponent("nearby-load").path
    }

    /// Starts the processes, sharing the devices among them.
    static func start(_ settings: ServerBenchmark.Settings, urls: [String], apiKey: String) async throws -> LoadWorkers {
        let generator = Self.generator
        var processes: [ChildProcess] = []
        do {
            for index in 0..<settings.processes {
                let share = { (total: Int) in total / settings.processes + (index < total % settings.processes ? 1 : 0) }
                let moving = share(settings.devices)
                let process = try await ChildProcess(name: "load-\(index)", executable: generator, arguments: [
                    "--urls", urls.joined(separator: ","), "--key", apiKey, "--process", "\(index)",
                    "--devices", "\(moving)", "--idle", "\(max(0, share(settings.streams) - moving))",
                    "--neighbours", "\(settings.neighbours)", "--seed", "\(settings.seed)",
                    "--to", "\(ServerBenchmark.project)@\(ServerBenchmark.xmppDomain)",
                ], takesInput: true)
                processes.append(process)
                try await process.waitForLine(containing: #"{"ready": true}"#, within: 60)
            }
        } catch {
            for process in processes { await process.stop() }
            throw error
        }
        return LoadWorkers(processes: processes)
    }

    /// The application server of the upstream figure (server_load.py
    /// appserver), its `sessions` logged in to the XMPP endpoint at `port` with `serverKey`.
    static func appServer(_ scripts: LoadScripts, port: Int, files: XMPPFiles, serverKey: String, sessions: Int) async throws -> LoadWorkers {
        let process = try await scripts.start("server_load.py", [
            "appserver", "--port", "\(port)", "--domain", ServerBenchmark.xmppDomain, "--project", ServerBenchmark.project,
            "--key", serverKey, "--ca", files.certificate, "--sessions", "\(sessions)",
        ], as: .root, name: "app-server", takesInput: true)
        do {
            try await process.waitForLine(containing: #"{"ready": true}"#, within: 60)
        } catch {
            await process.stop()
            throw error
        }
        return LoadWorkers(processes: [process])
    }

    /// Sends `command` to every process and waits for each one's result.
    func command(_ command: [String: Any], within seconds: Double) async throws -> [[String: Any]] {
        try await send(command, within: seconds, waitsForWindow: false) {}
    }

    /// A measured window that `command` starts in every process (each
    /// answering `{"measuring": ID}` as its window begins, then its counts):
    /// the counts summed, and the CPU each party used meanwhile.
    func measured(_ command: [String: Any], within seconds: Double, _ meter: CPUMeter) async throws -> ServerBenchmark.Window {
        var start: CPUMeter.Reading?
        let results = try await send(command, within: seconds, waitsForWindow: true) {
            start = meter.read()
        }
        var window = ServerBenchmark.Window()
        if let start { window.cpu = meter.shares(since: start) }
        for result in results {
            window.requests += result.int("requests")
            window.outcomes.add(result["outcomes"])
            window.events.add(result["events"])
            window.latencies += (result["latencies"] as? [Any] ?? []).compactMap { ($0 as? NSNumber)?.doubleValue }
            window.found += (result["found"] as? [Any] ?? []).compactMap { ($0 as? NSNumber)?.doubleValue }
            window.unanswered += result.int("unanswered")
        }
        // The processes' windows are of one length and start within milliseconds of each other.
        window.seconds = results.map { $0.double("seconds") }.reduce(0, +) / Double(max(results.count, 1))
        return window
    }

    /// Sends `command` to every process and waits for each one's result; with
    /// `waitsForWindow`, calls `windowStarted` once every process has begun its measured window.
    private func send(_ command: [String: Any], within seconds: Double, waitsForWindow: Bool,
                      windowStarted: () -> Void) async throws -> [[String: Any]] {
        let id = lastID.withLock { id in
            id += 1
            return id
        }
        var object = command
        object["id"] = id
        let line = String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        for process in processes { process.send(line) }
        if waitsForWindow {
            for process in processes { try await process.waitForLine(containing: "{\"measuring\": \(id)}", within: seconds) }
            windowStarted()
        }
        var results: [[String: Any]] = []
        for process in processes {
            let done = try jsonLine(try await process.waitForLine(containing: "{\"done\": \(id),", within: seconds))
            guard let result = done["result"] as? [String: Any] else { throw ChildProcessError(message: "no result in \(done)") }
            if let error = result["error"] { throw ChildProcessError(message: "\(process.name): \(error)") }
            results.append(result)
        }
        return results
    }

    /// One window of load (`run`): the generator's counts summed over its
    /// processes, and the CPU each party used from the first process's window start to the last one's end.
    func window(_ run: [String: Any], _ settings: ServerBenchmark.Settings, _ meter: CPUMeter) async throws -> ServerBenchmark.Window {
        var request = run
        request["do"] = "run"
        request["warmup"] = settings.warmUp
        request["seconds"] = settings.seconds
        return try await measured(request, within: settings.warmUp + settings.seconds + 60, meter)
    }

    func stop() async {
        for process in processes {
            process.send(#"{"do": "quit", "id": 0}"#)
        }
        for process in processes {
            if (try? await process.waitForExit(within: 30)) == nil { await process.stop() }
        }
    }
}

/// CPU time of the parties sharing the machine: the servers, PostgreSQL
/// (its postmaster and every backend), the generator.
private struct CPUMeter: Sendable {
    let servers: [Int32]
    let postgres: PostgresCluster?
    let generator: [Int32]

    struct Reading: Sendable {
        let at: ContinuousClock.Instant
        let servers: [Double]
        let postgres: Double
        let generator: Double
    }

    func read() -> Reading {
        Reading(at: .now, servers: servers.map(cpuSeconds(of:)),
                postgres: postgres?.serverPID.map { Self.treeSeconds(of: $0) } ?? 0,
                generator: generator.map(cpuSeconds(of:)).reduce(0, +))
    }

    func shares(since start: Reading) -> ServerBenchmark.CPUShares {
        let now = read()
        let wall = milliseconds(now.at - start.at) / 1000
        guard wall > 0 else { return ServerBenchmark.CPUShares() }
        return ServerBenchmark.CPUShares(servers: zip(now.servers, start.servers).map { ($0 - $1) / wall },
                                         postgres: (now.postgres - start.postgres) / wall,
                                         generator: (now.generator - start.generator) / wall)
    }

    /// CPU seconds of a process and its children now (PostgreSQL's backends
    /// are the postmaster's children; one that ended between two readings
    /// takes its time with it, but the servers' pooled connections live on).
    private static func treeSeconds(of parent: Int32) -> Double {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        var total = cpuSeconds(of: parent)
        for entry in entries {
            guard let pid = Int32(entry), pid != parent,
                  let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let end = stat.lastIndex(of: ")") else { continue }
            // After the command name: state, then the parent's pid.
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == parent { total += cpuSeconds(of: pid) }
        }
        return total
    }
}

/// PostgreSQL's own floor, from small clients on the same cluster and
/// machine: durable single-row inserts (pgbench, one client and sixteen),
/// NOTIFY transactions from eight sessions (the server's pool), and the
/// round trip of one notification from one session to a listening one
/// (server_load.py pg-notify), which every replica's every event makes.
struct PostgresFloor: Sendable {
    var insertsOne = 0.0
    var insertsSixteen = 0.0
    var notifies = 0.0
    var notifyRoundTrip: [Double] = []

    var summary: String {
        let rtt = Sample(notifyRoundTrip)
        return "inserts/s \(format(insertsOne, 0)) (1 client), \(format(insertsSixteen, 0)) (16); NOTIFY/s \(format(notifies, 0)) (8); "
            + "NOTIFY round trip p50 \(format(rtt.p50, 3)) ms, p99 \(format(rtt.p99, 3)) ms"
    }

    static func measure(_ cluster: PostgresCluster, _ scripts: LoadScripts, seconds: Double) async throws -> PostgresFloor {
        let url = try await cluster.createDatabase()
        // postgres://USER@/NAME?host=DIR
        guard let path = url.range(of: "@/"), let name = url[path.upperBound...].split(separator: "?").first.map(String.init) else {
            throw ChildProcessError(message: "no database name in \(url)")
        }
        let connection = ["-h", cluster.directory, "-U", cluster.superuser]
        let made = try await runProgram(cluster.program("psql"), connection + [
            "-d", name, "-v", "ON_ERROR_STOP=1", "-c", "CREATE TABLE floor_insert (id bigserial PRIMARY KEY, v integer NOT NULL)",
        ])
        guard made.status == 0 else { throw ChildProcessError(message: "psql: \(made.output)") }
        let directory = try TemporaryDirectory("nearby-bench-pgbench")
        defer { directory.remove() }
        let insert = try directory.write("insert.sql", "INSERT INTO floor_insert (v) VALUES (1);\n")
        let notify = try directory.write("notify.sql", "SELECT pg_notify('bench_rate', 'x');\n")

        func pgbench(_ script: String, clients: Int) async throws -> Double {
            let result = try await withTimeout(seconds + 60, "pgbench") {
                try await runProgram(cluster.program("pgbench"), connection + [
                    "-n", "-f", script, "-c", "\(clients)", "-j", "\(min(clients, 2))", "-T", "\(Int(seconds.rounded(.up)))", name,
                ])
            }
            guard result.status == 0,
                  let line = result.output.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
                  let tps = line.split(separator: " ").dropFirst(2).first.flatMap({ Double($0) }) else {
                throw ChildProcessError(message: "pgbench: \(result.output)")
            }
            return tps
        }

        var floor = PostgresFloor()
        floor.insertsOne = try await pgbench(insert, clients: 1)
        floor.insertsSixteen = try await pgbench(insert, clients: 16)
        floor.notifies = try await pgbench(notify, clients: 8)
        let probe = try await scripts.start("server_load.py", [
            "pg-notify", "--socket-dir", cluster.directory, "--user", cluster.superuser, "--database", name, "--count", "1000",
        ], as: .root, name: "pg-notify")
        let line = try await probe.waitForLine(containing: #"{"rtt_ms": "#, within: 120)
        _ = try await probe.waitForExit()
        floor.notifyRoundTrip = (try jsonLine(line)["rtt_ms"] as? [Any] ?? []).compactMap { ($0 as? NSNumber)?.doubleValue }
        return floor
    }
}

extension ServerBenchmark {
    /// The Markdown tables for doc/performance.md.
    fileprivate static func report(_ results: [DeploymentResult], floor: PostgresFloor?, sqliteInserts: SQLiteFloor?,
                                   _ settings: Settings) -> String {
        func mib(_ kib: [Int]) -> String { kib.map { format(Double($0) / 1024) }.joined(separator: " + ") }
        func shares(_ cpu: CPUShares) -> String {
            let servers = cpu.servers.map { format($0 * 100, 0) }.joined(separator: " + ")
            return "\(servers) / \(format(cpu.postgres * 100, 0)) / \(format(cpu.generator * 100, 0))"
        }
        var text = """
            nearby-server under load, under the default [http] limits: \(settings.devices) moving devices (\(settings.neighbours) tokens heard each, one \
            changed per report) and \(settings.streams) streams in all, from \(settings.processes) generator processes \
            (nearby-load); \(settings.concurrency) requests in flight at saturation; windows of \
            \(format(settings.seconds, 0)) s after \(format(settings.warmUp, 0)) s of warm-up. Generator, servers and PostgreSQL \
            share the machine's \(ProcessInfo.processInfo.activeProcessorCount) cores.

            """
        let sightings = results.filter { $0.sightings.seconds > 0 }
        if !sightings.isEmpty {
            text += """

                Sighting reports at saturation, against the same server's GET /v1/health under the same generator and concurrency:
                | deployment | reports/s | found + lost events/s | floor: /v1/health requests/s | reports / floor | failed | CPU % servers / PostgreSQL / generator | server CPU µs per report, each replica |
                | --- | --- | --- | --- | --- | --- | --- | --- |

                """
        }
        for result in sightings {
            let window = result.sightings
            let events = Double(window.events["found"] + window.events["lost"]) / max(window.seconds, 0.001)
            let perReport = window.cpu.servers.map { format($0 / max(window.rate, 1) * 1e6, 0) }.joined(separator: " + ")
            text += "| \(result.deployment) | \(format(window.rate, 0)) | \(format(events, 0)) | \(format(result.health.rate, 0)) | "
                + "\(format(window.rate / max(result.health.rate, 1), 2)) | \(window.failed + result.health.failed) | "
                + "\(shares(window.cpu)) (health: \(shares(result.health.cpu))) | \(perReport) |\n"
        }
        if !sightings.isEmpty {
            text += """

                The HTTP floor: GET /v1/health at saturation from the same generator, answered by the servers and by \
                nginx (one process, a fixed 200, no access log):
                | deployment | /v1/health requests/s | nginx requests/s | server CPU µs per request, all replicas | nginx CPU µs per request | server / nginx |
                | --- | --- | --- | --- | --- | --- |

                """
        }
        for result in sightings {
            let server = result.health.cpu.servers.reduce(0, +) / max(result.health.rate, 1) * 1e6
            let nginx = result.nginxHealth.cpu.servers.reduce(0, +) / max(result.nginxHealth.rate, 1) * 1e6
            text += "| \(result.deployment) | \(format(result.health.rate, 0)) | \(format(result.nginxHealth.rate, 0)) | "
                + "\(format(server, 1)) | \(format(nginx, 1)) | \(format(server / max(nginx, 0.001), 2)) |\n"
        }
        if !sightings.isEmpty {
            text += """

                CPU per report at \(format(settings.costRate, 0)) reports a second offered to every deployment (below each one's \
                saturation), above each server's CPU with the streams held and no request (idle, over a window as long); \
                each replica's against one replica's of the same engine:
                | deployment | reports/s answered | server CPU % idle, each replica | server CPU µs per report above idle, each replica | each replica / one replica | all replicas / one replica |
                | --- | --- | --- | --- | --- | --- |

                """
        }
        for result in sightings {
            let perReport = result.marginalMicrosecondsPerReport
            let single = sightings.first { $0.deployment.replicas == 1 && $0.deployment.isPostgres == result.deployment.isPostgres }
                .map { $0.marginalMicrosecondsPerReport.reduce(0, +) }
            let each = single.map { one in perReport.map { format($0 / max(one, 1), 2) }.joined(separator: " + ") } ?? ""
            let all = single.map { format(perReport.reduce(0, +) / max($0, 1), 2) } ?? ""
            text += "| \(result.deployment) | \(format(result.sightingsAtCostRate.rate, 0)) | "
                + "\(result.idle.servers.map { format($0 * 100, 1) }.joined(separator: " + ")) | "
                + "\(perReport.map { format($0, 0) }.joined(separator: " + ")) | \(each) | \(all) |\n"
        }
        if !sightings.isEmpty {
            text += """

                Found latency (sighting report sent → found on the observer's stream) at half the saturation rate, against \
                GET /v1/health's round trip at the same rate from the same generator:
                | deployment | reports/s offered / answered | found p50 ms | found p99 ms | founds / expected | report answered p50 / p99 ms | floor: /v1/health p50 / p99 ms | found p50 / floor p50 | found p99 / floor p99 |
                | --- | --- | --- | --- | --- | --- | --- | --- | --- |

                """
        }
        for result in sightings {
            let paced = result.sightingsPaced, found = Sample(paced.found), answered = Sample(paced.latencies)
            let floorSample = Sample(result.healthPaced.latencies)
            let offered = result.sightings.rate / 2
            text += "| \(result.deployment) | \(format(offered, 0)) / \(format(paced.rate, 0)) | \(format(found.p50, 2)) | "
                + "\(format(found.p99, 2)) | \(paced.found.count) / \(paced.found.count + paced.unanswered) | "
                + "\(format(answered.p50, 2)) / \(format(answered.p99, 2)) | \(format(floorSample.p50, 2)) / \(format(floorSample.p99, 2)) | "
                + "\(format(found.p50 / floorSample.p50, 2)) | \(format(found.p99 / floorSample.p99, 2)) |\n"
        }
        let streams = results.filter { $0.streamsAsked > 0 }
        if !streams.isEmpty {
            text += """

                Device streams held at once under the default [http] limits, and the servers' resident memory (VmRSS) \
                before and after they opened:
                | deployment | [http] max-connections | streams asked | held (each replica) | refused | VmRSS before MiB | after MiB | KiB per stream, each replica |
                | --- | --- | --- | --- | --- | --- | --- | --- |

                """
        }
        for result in streams {
            let refused = result.streamOutcomes.counts.filter { $0.key != "opened" }.map { "\($0.key) \($0.value)" }.sorted()
                .joined(separator: ", ")
            let perStream = zip(zip(result.residentBeforeKiB, result.residentAfterKiB), result.streamsPerReplica).map { pair, count in
                format(Double(pair.1 - pair.0) / Double(max(count, 1)), 1)
            }.joined(separator: " + ")
            text += "| \(result.deployment) | 16384 (default) | \(result.streamsAsked) | \(result.streamsHeld) "
                + "(\(result.streamsPerReplica.map(String.init).joined(separator: " + "))) | \(refused.isEmpty ? "0" : refused) | "
                + "\(mib(result.residentBeforeKiB)) | \(mib(result.residentAfterKiB)) | \(perStream) |\n"
        }
        text += upstreamReport(results, floor: floor, sqliteInserts: sqliteInserts, settings)
        if let floor {
            let rtt = Sample(floor.notifyRoundTrip)
            let postgres = results.filter { if case .postgres = $0.deployment { true } else { false } }
            text += """

                PostgreSQL's own floor on the same cluster (durable: fsync on, synchronous_commit on), and the PostgreSQL \
                deployments against it:
                | measure | value | |
                | --- | --- | --- |
                | durable single-row inserts/s, 1 client (pgbench) | \(format(floor.insertsOne, 0)) | |
                | durable single-row inserts/s, 16 clients (pgbench) | \(format(floor.insertsSixteen, 0)) | |
                | NOTIFY transactions/s, 8 clients (the server's pool; pgbench) | \(format(floor.notifies, 0)) | 1.00 |
                | NOTIFY → LISTEN round trip, p50 / p99 ms (1,000, one at a time) | \(format(rtt.p50, 3)) / \(format(rtt.p99, 3)) | |

                """
            for result in postgres where result.sightings.seconds > 0 {
                text += "| \(result.deployment): reports/s at saturation / NOTIFY transactions/s | \(format(result.sightings.rate, 0)) "
                    + "| \(format(result.sightings.rate / max(floor.notifies, 1), 2)) |\n"
                text += "| \(result.deployment): found p50 / NOTIFY round trip p50 | \(format(Sample(result.sightingsPaced.found).p50, 2)) ms "
                    + "| \(format(Sample(result.sightingsPaced.found).p50 / rtt.p50, 1)) |\n"
            }
        }
        return text
    }
}

extension ServerBenchmark {
    /// The upstream table: messages/s end to end against the floors of the same run.
    fileprivate static func upstreamReport(_ results: [DeploymentResult], floor: PostgresFloor?, sqliteInserts: SQLiteFloor?,
                                           _ settings: Settings) -> String {
        let measured = results.compactMap { result in result.upstream.map { (result.deployment, $0) } }
        guard !measured.isEmpty else { return "" }
        func shares(_ cpu: CPUShares) -> String {
            let servers = cpu.servers.map { format($0 * 100, 0) }.joined(separator: " + ")
            return "\(servers) / \(format(cpu.postgres * 100, 0)) / \(format(cpu.generator * 100, 0))"
        }
        var text = """

            Upstream messages, device channel → one application server (\(settings.upstreamSessions) XMPP sessions on replica 1, acking each) → \
            `sent` on the device's channel; \(settings.upstreamDevices) devices, \(settings.upstreamInFlight) messages out \
            each, window of \(format(settings.seconds, 0)) s after a warm-up until as many had their `sent` as were sent at first. \
            Floors of the same run: the same application server's downstream dry runs (XMPP, TLS and the CCS layer, \
            a registration read, no write) 100 in flight, and the engine's single-row inserts from one client (SQLite: \
            WAL with synchronous FULL, as the server's connection; PostgreSQL: pgbench, fsync and synchronous_commit on):
            | deployment | devices (channels) | messages/s | p50 ms | p99 ms | failed or lost / left | floor: dry runs/s | messages / dry runs | floor: inserts/s, 1 client | messages / inserts | dry run round trip p50 / p99 ms | warm-up s | CPU % servers / PostgreSQL / generator + application server | server CPU µs per message, each replica | application server CPU µs per message |
            | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |

            """
        for (deployment, upstream) in measured {
            let window = upstream.window, latency = Sample(window.latencies), rtt = Sample(upstream.dryRunRTT)
            let inserts: Double? = if case .sqlite = deployment { sqliteInserts?.full } else { floor?.insertsOne }
            // The devices' own: failed events, messages lost with a channel (the application server's nacks are listed below).
            let failed = upstream.outcomes.counts.filter { !$0.key.hasPrefix("application server") }.values.reduce(0, +)
            let perMessage = window.cpu.servers.map { format($0 / max(window.rate, 1) * 1e6, 0) }.joined(separator: " + ")
            text += "| \(deployment) | \(upstream.devices) | \(format(window.rate, 0)) | \(format(latency.p50, 1)) | "
                + "\(format(latency.p99, 1)) | \(failed) / \(upstream.left) | \(format(upstream.dryRunRate, 0)) | "
                + "\(format(window.rate / max(upstream.dryRunRate, 1), 2)) | \(inserts.map { format($0, 0) } ?? "") | "
                + "\(inserts.map { format(window.rate / max($0, 1), 2) } ?? "") | \(format(rtt.p50, 2)) / \(format(rtt.p99, 2)) | "
                + "\(upstream.warmUpSeconds.map { format($0) } ?? "not finished") | \(shares(window.cpu)) | \(perMessage) | "
                + "\(format(upstream.appServerCPU / max(window.rate, 1) * 1e6, 0)) |\n"
        }
        if let sqliteInserts {
            text += "\nSQLite single-row inserts/s with synchronous NORMAL (no sync per commit): \(format(sqliteInserts.normal, 0)).\n"
        }
        if let slixmpp = measured.lazy.compactMap({ $0.1.slixmppDryRunRate }).first {
            text += "\nThe same dry runs from slixmpp (bench/ccs_appserver.py), 100 in flight: \(format(slixmpp, 0))/s.\n"
        }
        let outcomes = measured.map { "\($0.0): \($0.1.outcomes.summary.isEmpty ? "none" : $0.1.outcomes.summary); acked \($0.1.acked)" }
        text += "\nUpstream outcomes other than sent, over each whole run: " + outcomes.joined(separator: "; ") + "\n"
        return text
    }
}

/// Runs `body`, then `cleanup` however `body` ended; rethrows `body`'s error.
private func ensuring<T>(_ body: () async throws -> T, finally cleanup: () async -> Void) async throws -> T {
    let outcome: Result<T, any Error>
    do {
        outcome = .success(try await body())
    } catch {
        outcome = .failure(error)
    }
    await cleanup()
    return try outcome.get()
}

extension [String: Any] {
    fileprivate func int(_ key: String) -> Int { (self[key] as? NSNumber)?.intValue ?? 0 }
    fileprivate func double(_ key: String) -> Double { (self[key] as? NSNumber)?.doubleValue ?? 0 }
}
