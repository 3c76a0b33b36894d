import Foundation
import Synchronization
import TestSupport

/// nearby-server under load: real server processes, on SQLite or on a
/// throwaway PostgreSQL cluster with one replica and with two, under the
/// default `[http]` limits, driven by simulated devices that speak the device API directly
/// (bench/server_load.py on aiohttp, a few processes). Each figure comes with
/// a floor measured in the same run: the same server's `GET /v1/health` under
/// the same generator, and PostgreSQL's own commit and NOTIFY costs.
enum ServerBenchmark {
    /// The figures a run measures.
    enum Part: String, Sendable, CaseIterable {
        /// The streams held, and the memory they take.
        case streams
        /// Sighting reports at saturation, and found latency at half that rate (on open streams).
        case sightings
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
        var processes = 4
        /// Requests in flight at saturation, over all the generator's processes.
        var concurrency = 64
        /// Tokens each moving device hears at once.
        var neighbours = 4
        /// Seconds of each measured window, and of the warm-up before it.
        var seconds = 10.0
        var warmUp = 2.0
        var seed = 1
    }

    /// One of the deployments measured.
    enum Deployment: Sendable, CustomStringConvertible {
        case sqlite
        case postgres(replicas: Int)

        var replicas: Int {
            if case .postgres(let replicas) = self { return replicas }
            return 1
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
        try await ensuring {
            if settings.sqlite {
                results += try await measure([.sqlite], settings, scripts, cluster: nil)
            }
            if settings.postgres {
                let cluster = try await PostgresCluster.start(durable: true)
                try await ensuring {
                    floor = try await PostgresFloor.measure(cluster, scripts, seconds: min(settings.seconds, 5))
                    progress("server: PostgreSQL floor: \(floor!.summary)")
                    results += try await measure([.postgres(replicas: 1), .postgres(replicas: 2)], settings, scripts,
                                                 cluster: cluster)
                } finally: {
                    await cluster.stop()
                }
            }
        } finally: {
            scripts.remove()
        }
        print(report(results, floor: floor, settings))
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
    /// matches and streams are not) and measured in turn. With `cluster`,
    /// PostgreSQL; else a new SQLite file.
    private static func measure(_ deployments: [Deployment], _ settings: Settings, _ scripts: LoadScripts,
                                cluster: PostgresCluster?) async throws -> [DeploymentResult] {
        let directory = try TemporaryDirectory("nearby-bench-server")
        var replicas: [Replica] = []
        var workers: LoadWorkers?
        var results: [DeploymentResult] = []
        try await ensuring {
            let database = try await cluster?.createDatabase() ?? directory.file("server.sqlite")
            let apiKey = try await createProject(database: database)
            func start(_ deployment: Deployment) async throws {
                progress("server: \(deployment): starting")
                for replica in replicas { await replica.process.stop() }
                replicas = []
                for index in 0..<deployment.replicas {
                    replicas.append(try await Replica.start("nearby-server-\(index + 1)", in: directory, database: database,
                                                            configuration: configuration))
                }
            }
            try await start(deployments[0])
            let load = try await LoadWorkers.start(scripts, settings, urls: replicas.map(\.url), apiKey: apiKey)
            workers = load

            let setup = try await load.command(["do": "setup"], within: 900)
            let setupSeconds = setup.map { $0.double("seconds") }.max() ?? 0
            let failed = setup.map { $0.int("failed") }.reduce(0, +)
            guard failed == 0 else {
                var counts = Tally()
                setup.forEach { counts.add($0["counts"]) }
                throw ChildProcessError(message: "\(failed) devices could not be set up: \(counts.summary)")
            }
            progress("server: \(deployments[0]): \(settings.streams) devices registered in \(format(setupSeconds)) s")
            for (index, deployment) in deployments.enumerated() {
                if index > 0 {
                    _ = try await load.command(["do": "close"], within: 120)
                    try await start(deployment)
                    _ = try await load.command(["do": "urls", "urls": replicas.map(\.url)], within: 30)
                }
                var result = try await measure(deployment, on: replicas, load, settings, cluster: cluster)
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

    /// The figures of one deployment, whose `replicas` were just started and
    /// whose devices are registered, with no stream open.
    private static func measure(_ deployment: Deployment, on replicas: [Replica], _ load: LoadWorkers, _ settings: Settings,
                                cluster: PostgresCluster?) async throws -> DeploymentResult {
        var result = DeploymentResult(deployment: deployment)
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
        guard settings.parts.contains(.sightings) else { return result }

        // Figure 1: saturation, against /v1/health under the same generator and concurrency.
        let meter = CPUMeter(servers: replicas.map(\.process.pid), postgres: cluster, generator: load.pids)
        let perProcess = max(1, settings.concurrency / settings.processes)
        result.health = try await load.window(["kind": "health", "concurrency": perProcess], settings, meter)
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
        return result
    }

    /// The servers' configuration: the default `[http]` limits, and
    /// registration's rate limits raised: thousands of devices register
    /// within a minute from the generator's few addresses, which the
    /// defaults (10 a minute per address, 600 per project) are there to refuse.
    private static let configuration = """
        [limits]
        registrations-per-address-per-minute = 60000
        registrations-per-project-per-minute = 600000

        """

    /// The server lowers its default `[http] max-connections` (16,384)
    /// when the hard descriptor limit is lower than its budget
    /// (DescriptorBudget), and would then refuse streams: say so before starting anything.
    private static func checkDescriptors(_ settings: Settings) throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let needed = 16_384 + 64 + 4 * ProcessInfo.processInfo.activeProcessorCount
        guard limit.rlim_max >= rlim_t(needed) else {
            throw ChildProcessError(message: "nearby-server's default connection limits need \(needed) file descriptors, "
                                    + "but the hard limit is \(limit.rlim_max): raise it (ulimit -Hn)")
        }
    }

    private static func createProject(database: String) async throws -> String {
        let result = try await runProgram(Programs.path("nearby-server"),
                                          ["project", "create", "bench", "--database", database, "--json"])
        guard result.status == 0, let object = try? jsonLine(result.output), let apiKey = object["apiKey"] as? String else {
            throw ChildProcessError(message: "project create failed: \(result.output)")
        }
        return apiKey
    }
}

/// One nearby-server process of a deployment.
private struct Replica: Sendable {
    let process: ChildProcess
    let url: String

    /// Starts `nearby-server serve` on `database` (an SQLite file or a
    /// PostgreSQL URL) with `configuration`, at `info` as deployed, on a free port.
    static func start(_ name: String, in directory: TemporaryDirectory, database: String, configuration: String) async throws -> Replica {
        let process = try await ChildProcess(name: name, executable: Programs.path("nearby-server"), arguments: [
            "serve", "--listen", "127.0.0.1:0", "--database", database,
            "--config", try directory.write("\(name).conf", configuration), "--log-level", "info",
        ])
        let line = try await process.waitForLine(containing: "nearby-server: listening on ", within: 60)
        return Replica(process: process, url: line[line.range(of: "listening on ")!.upperBound...].trimmingCharacters(in: .whitespaces))
    }
}

/// The generator's processes (bench/server_load.py worker), driven by
/// commands on their standard input and answering each with a line.
private final class LoadWorkers: Sendable {
    let processes: [ChildProcess]
    private let lastID = Mutex(0)

    var pids: [Int32] { processes.map(\.pid) }

    private init(processes: [ChildProcess]) {
        self.processes = processes
    }

    /// Starts the processes, sharing the devices among them.
    static func start(_ scripts: LoadScripts, _ settings: ServerBenchmark.Settings, urls: [String], apiKey: String) async throws -> LoadWorkers {
        var processes: [ChildProcess] = []
        do {
            for index in 0..<settings.processes {
                let share = { (total: Int) in total / settings.processes + (index < total % settings.processes ? 1 : 0) }
                let moving = share(settings.devices)
                let process = try await scripts.start("server_load.py", [
                    "worker", "--urls", urls.joined(separator: ","), "--key", apiKey, "--process", "\(index)",
                    "--devices", "\(moving)", "--idle", "\(max(0, share(settings.streams) - moving))",
                    "--neighbours", "\(settings.neighbours)", "--seed", "\(settings.seed)",
                ], as: .root, name: "load-\(index)", takesInput: true)
                processes.append(process)
                try await process.waitForLine(containing: #"{"ready": true}"#, within: 60)
            }
        } catch {
            for process in processes { await process.stop() }
            throw error
        }
        return LoadWorkers(processes: processes)
    }

    /// Sends `command` to every process and waits for each one's result.
    func command(_ command: [String: Any], within seconds: Double) async throws -> [[String: Any]] {
        try await send(command, within: seconds, waitsForWindow: false) {}
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
        var start: CPUMeter.Reading?
        let results = try await send(request, within: settings.warmUp + settings.seconds + 60, waitsForWindow: true) {
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
        Reading(at: .now, servers: servers.map(ScanBenchmark.cpuSeconds(of:)),
                postgres: postgres?.serverPID.map { Self.treeSeconds(of: $0) } ?? 0,
                generator: generator.map(ScanBenchmark.cpuSeconds(of:)).reduce(0, +))
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
        var total = ScanBenchmark.cpuSeconds(of: parent)
        for entry in entries {
            guard let pid = Int32(entry), pid != parent,
                  let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let end = stat.lastIndex(of: ")") else { continue }
            // After the command name: state, then the parent's pid.
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == parent { total += ScanBenchmark.cpuSeconds(of: pid) }
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
    fileprivate static func report(_ results: [DeploymentResult], floor: PostgresFloor?, _ settings: Settings) -> String {
        func mib(_ kib: [Int]) -> String { kib.map { format(Double($0) / 1024) }.joined(separator: " + ") }
        func shares(_ cpu: CPUShares) -> String {
            let servers = cpu.servers.map { format($0 * 100, 0) }.joined(separator: " + ")
            return "\(servers) / \(format(cpu.postgres * 100, 0)) / \(format(cpu.generator * 100, 0))"
        }
        var text = """
            nearby-server under load, under the default [http] limits: \(settings.devices) moving devices (\(settings.neighbours) tokens heard each, one \
            changed per report) and \(settings.streams) streams in all, from \(settings.processes) generator processes \
            (bench/server_load.py); \(settings.concurrency) requests in flight at saturation; windows of \
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
        text += """

            Device streams held at once under the default [http] limits, and the servers' resident memory (VmRSS) \
            before and after they opened:
            | deployment | [http] max-connections | streams asked | held (each replica) | refused | VmRSS before MiB | after MiB | KiB per stream, each replica |
            | --- | --- | --- | --- | --- | --- | --- | --- |

            """
        for result in results {
            let refused = result.streamOutcomes.counts.filter { $0.key != "opened" }.map { "\($0.key) \($0.value)" }.sorted()
                .joined(separator: ", ")
            let perStream = zip(zip(result.residentBeforeKiB, result.residentAfterKiB), result.streamsPerReplica).map { pair, count in
                format(Double(pair.1 - pair.0) / Double(max(count, 1)), 1)
            }.joined(separator: " + ")
            text += "| \(result.deployment) | 16384 (default) | \(result.streamsAsked) | \(result.streamsHeld) "
                + "(\(result.streamsPerReplica.map(String.init).joined(separator: " + "))) | \(refused.isEmpty ? "0" : refused) | "
                + "\(mib(result.residentBeforeKiB)) | \(mib(result.residentAfterKiB)) | \(perStream) |\n"
        }
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
