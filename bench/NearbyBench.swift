import ArgumentParser
import DBus
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NearbyMessages
import TestSupport

@main
struct NearbyBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearby-bench",
        abstract: "Benchmarks of nearbyd, each against a reference measured in the same run.",
        discussion: """
            discovery  Publish-to-MessageFound and Unpublish-to-MessageLost over
                       nearby-air, against the round trips the path cannot avoid
                       (one D-Bus call to the daemon, one HTTP request to the server).
            dbus       Publish+Unpublish pairs per second from one client, pipelined,
                       against the minimal C sd-bus service of
                       ../shared/bench/dbus-reference on the same private bus, both
                       driven by C sd-bus load clients; and the CPU per call of the
                       service, dbus-daemon and the client in each.
            memory     nearbyd's resident memory idle and with 10,000 live
                       publications, against the reference C service's.
            scan       CPU of nearbyd's BlueZ backend per 1,000 advertisement
                       reports per second from bluetoothd's stand-in, against a
                       C sd-bus consumer reading the same signals (scan_floor).
            upstream   SendMessage-to-SendSucceeded through nearby-server's connection
                       server and a slixmpp application server (bench/ccs_appserver.py)
                       that acks, from one sender and from 100 at once, against the
                       round trips the path cannot avoid (D-Bus, HTTP, an XMPP dry run)
                       and the dry-run rate of one XMPP connection.
            isolation  One client's wait for nearbyd's answers (p50, p99) while other
                       clients, of its own user or another, flood it with SetPermission,
                       30 MiB arguments, Publish/Unpublish or SendMessage, against its
                       wait alone and a C sd-bus service's under the same load.
                       About 4 minutes.
            soak       Churn: 10,000 D-Bus clients connecting, publishing, subscribing,
                       sending upstream and leaving (cleanly, by closing, or killed),
                       1,000 devices registering with nearby-server's HTTP API and
                       vanishing, application servers connecting and dropping. Then
                       every object, row, descriptor and thread against the baseline
                       taken before; fails naming what is left, or resident memory
                       more than 10 % over its baseline. About 6 minutes.
            server     nearby-server alone under load from simulated devices
                       speaking its HTTP and WebSocket API (nearby-load, SwiftNIO),
                       on SQLite, and on a throwaway PostgreSQL with one replica
                       to three, under the default [http] limits: sighting
                       reports per second at saturation against the same
                       server's /v1/health rate under the same generator, and
                       /v1/health against nginx's; found latency at half that
                       rate against /v1/health's round trip at that rate; CPU
                       per report at one rate for all; device streams held
                       (10,000) and memory per
                       stream; upstream messages per second from 1,000 devices'
                       channels through one application server, against its
                       dry-run rate and the engine's durable insert rate;
                       PostgreSQL's own insert, NOTIFY and NOTIFY round-trip
                       floor. Also alone: make bench-server. About 15 minutes.

            The programs come from --bin (a release build: make bench), the C programs
            from --reference (bench/reference/build.sh). Results go to stdout as
            Markdown rows for doc/performance.md.
            """,
        subcommands: [All.self, Discovery.self, Throughput.self, Memory.self, Scan.self, Upstream.self,
                      Isolation.self, Soak.self, Server.self],
        defaultSubcommand: All.self
    )
}

struct Locations: ParsableArguments {
    @Option(help: ArgumentHelp("Directory of the built programs: by default where `make static-programs` builds them, as the packages hold them (release, the Swift runtime linked in statically).",
                               valueName: "dir"))
    var bin = ".build-static/release"

    @Option(help: ArgumentHelp("Directory of the C reference programs.", valueName: "dir"))
    var reference = "bench/reference/bin"

    /// Prepares a benchmark's run: the programs it starts are the built ones
    /// in `bin`, and a signal that ends nearby-bench ends them (``SignalExit``).
    func apply() {
        setenv("NEARBYD_BIN_DIR", URL(fileURLWithPath: bin).standardizedFileURL.path, 1)
        SignalExit.install()
    }

    func program(_ name: String) -> String {
        URL(fileURLWithPath: reference).standardizedFileURL.appendingPathComponent(name).path
    }
}

struct All: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run every benchmark.")

    @OptionGroup var locations: Locations

    func run() async throws {
        locations.apply()
        try await DiscoveryBenchmark.run(trials: 100)
        try await ThroughputBenchmark.run(locations: locations, pairs: 20_000, window: 64, rounds: 7)
        try await MemoryBenchmark.run(locations: locations, publications: 10_000)
        try await ScanBenchmark.run(locations: locations, rate: 1000, seconds: 10, rounds: 3)
        try await UpstreamBenchmark.run(messages: 500, senders: 100, total: 5000)
        try await IsolationBenchmark.run(locations: locations, seconds: 10, interval: 2000, connections: 3, window: 16)
        try await ServerBenchmark.run(ServerBenchmark.Settings())
        // Last: it fails (after printing its figures) when something is left.
        try await SoakBenchmark.run(SoakBenchmark.Settings())
    }
}

struct Discovery: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Discovery latency over nearby-air.")

    @OptionGroup var locations: Locations

    @Option(help: "Trials (at least 100 for a p99).")
    var trials = 100

    func run() async throws {
        locations.apply()
        try await DiscoveryBenchmark.run(trials: trials)
    }
}

struct Throughput: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "dbus", abstract: "D-Bus throughput against the reference service.")

    @OptionGroup var locations: Locations

    @Option(help: "Pairs per round.")
    var pairs = 20_000

    @Option(help: "Calls in flight.")
    var window = 64

    @Option(help: "Rounds of each, alternating; medians are reported.")
    var rounds = 7

    func run() async throws {
        locations.apply()
        try await ThroughputBenchmark.run(locations: locations, pairs: pairs, window: window, rounds: rounds)
    }
}

struct Memory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Resident memory idle and with many publications.")

    @OptionGroup var locations: Locations

    @Option(help: "Live publications to hold.")
    var publications = 10_000

    func run() async throws {
        locations.apply()
        try await MemoryBenchmark.run(locations: locations, publications: publications)
    }
}

struct Scan: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "BLE scanning cost through BlueZ against a C consumer.")

    @OptionGroup var locations: Locations

    @Option(help: "Advertisement reports per second.")
    var rate: UInt32 = 1000

    @Option(help: "Seconds per round.")
    var seconds: UInt32 = 10

    @Option(help: "Rounds; medians are reported.")
    var rounds = 3

    func run() async throws {
        locations.apply()
        try await ScanBenchmark.run(locations: locations, rate: rate, seconds: seconds, rounds: rounds)
    }
}

struct Upstream: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Upstream message latency and rate through the connection server.")

    @OptionGroup var locations: Locations

    @Option(help: "Messages from one sender, and round trips of each floor (at least 100 for a p99).")
    var messages = 500

    @Option(help: "Senders at once, each an app with its own manager.")
    var senders = 100

    @Option(help: "Messages from all the senders together.")
    var total = 5000

    func run() async throws {
        locations.apply()
        try await UpstreamBenchmark.run(messages: messages, senders: senders, total: total)
    }
}

struct Soak: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Churn and soak: nothing left afterwards, memory back within 10 % of its baseline.",
        discussion: """
            A warm-up round (320 clients, 100 devices), a quiet period and the baseline; then the \
            clients and devices in --rounds rounds, each measured the same way. In a round the \
            clients run in processes of 500 (root's, --concurrency at once), a fifth of them in \
            processes of 16 (nobody's) killed with SIGKILL once they have published and subscribed; \
            half of all leave cleanly (Unpublish, Unsubscribe, Release), the rest close their \
            connection. The devices register, publish, subscribe, open their stream, report hearing \
            each other and nearbyd, and are deleted or go silent; application servers \
            (bench/ccs_appserver.py) log in and drop meanwhile. After a round every app comes back \
            once with an application server there, so that the outbox empties, and each figure is \
            taken after --quiet seconds. The figures are read from outside: /proc, busctl, sqlite3.

            Exits with a failure that names each figure over its limit after the last round.
            """)

    @OptionGroup var locations: Locations

    @Option(help: "D-Bus clients over the run.")
    var clients = 10_000

    @Option(help: "Devices registering with nearby-server over the run.")
    var devices = 1_000

    @Option(help: "Rounds the clients and devices are split into, each measured (a leak grows from one to the next).")
    var rounds = 2

    @Option(help: "root's clients connected at once (nearbyd's max-clients-per-user is 64).")
    var concurrency = 40

    @Option(help: "Seed of the clients' and devices' choices.")
    var seed = 1

    @Option(help: "Seconds of quiet before each measurement (nearbyd's idle HTTP connections close after 60).")
    var quiet = 70.0

    func run() async throws {
        locations.apply()
        try await SoakBenchmark.run(SoakBenchmark.Settings(clients: clients, devices: devices, rounds: rounds, concurrency: concurrency,
                                                           seed: seed, quiet: quiet))
    }
}

struct Server: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "nearby-server under load: sightings, found latency, streams held, upstream messages, on SQLite and PostgreSQL.",
        discussion: """
            Starts nearby-server (--bin) on a temporary SQLite file, then on a throwaway PostgreSQL cluster \
            (durable: fsync on) with one replica, then two, up to --replicas (load split across them), each on a new database, \
            under the default [http] limits (max-connections 16384, max-connections-per-address 256). \
            --processes generator processes (nearby-load, on SwiftNIO, built beside nearby-bench) register the devices: --devices \
            moving ones, which take a token, publish and subscribe, and the rest only to hold a stream, \
            --streams in all. Each moving device hears --neighbours others' tokens and each report changes one, \
            so an edge appears and one vanishes and found and lost reach its stream. Figures, each against a \
            floor of the same run:

            1. sighting reports per second with --concurrency in flight, against GET /v1/health per second from \
            the same generator at the same concurrency; with the CPU each party (servers, PostgreSQL, \
            generator) used meanwhile; and the same GET /v1/health answered by Debian's nginx (one process, \
            a fixed 200: the HTTP floor's floor), CPU per request against the servers';
            2. found latency (report sent → found on the observer's stream) p50 and p99 at half the rate of 1, \
            against GET /v1/health's round trip at that rate;
            2b. server CPU per report at --cost-rate reports a second, the same for every deployment \
            (below each one's saturation): each replica's against one replica's of the same engine;
            3. streams held and the servers' VmRSS before and after they opened (each device's stream and \
            channel from an address of its own group, 100 devices an address);
            4. upstream messages per second end to end: --upstream-devices devices open their direct \
            channel (split over the replicas) and keep --upstream-in-flight messages out each, one \
            application server (server_load.py appserver, --upstream-sessions XMPP sessions on replica 1) \
            acks every one, \
            and each message counts when its `sent` event reaches its device; p50 and p99 send → sent. \
            Against the same application server's dry runs (100 in flight) and the engine's durable \
            single-row inserts per second from one client (SQLite: a file in WAL mode beside the server's; \
            PostgreSQL: pgbench); the SQLite run also gives slixmpp's dry-run rate (bench/ccs_appserver.py);
            5. for PostgreSQL: durable single-row inserts per second from 1 and 16 clients and NOTIFY \
            transactions per second from 8 (pgbench), and a NOTIFY's round trip to a listening session.

            --parts picks figures: streams (3), sightings (1 and 2, with the streams open), upstream (4). \
            The servers' configuration raises registration's rate limits (every device registers from the \
            generator's addresses within a minute) and turns on the XMPP endpoint; nothing else. Each \
            window lasts --seconds after --warm-up seconds.
            """)

    @OptionGroup var locations: Locations

    @Option(help: "sqlite, postgres (one replica, then more: --replicas) or all.")
    var engine = "all"

    @Option(help: "Moving devices (publish, subscribe, report sightings), in all.")
    var devices = 2_000

    @Option(help: "Streams held at once, the moving devices' included.")
    var streams = 10_000

    @Option(help: "Generator processes.")
    var processes = 2

    @Option(help: "Requests in flight at saturation, over all the generator's processes.")
    var concurrency = 64

    @Option(help: "Tokens each moving device hears at once.")
    var neighbours = 4

    @Option(help: "Seconds of each measured window.")
    var seconds = 10.0

    @Option(help: "Seconds of warm-up before each window.")
    var warmUp = 2.0

    @Option(help: ArgumentHelp("Figures to measure, comma-separated: streams, sightings, upstream, or all.", valueName: "parts"))
    var parts = "all"

    @Option(help: "Devices that open their channel and send upstream messages.")
    var upstreamDevices = 1_000

    @Option(help: "Upstream messages each of them keeps out at once.")
    var upstreamInFlight = 2

    @Option(help: ArgumentHelp("XMPP sessions of the application server (CCS holds at most 100 messages unacked on one).",
                               valueName: "sessions"))
    var upstreamSessions = 4

    @Option(help: "Seed of the devices' moves.")
    var seed = 1

    @Option(help: ArgumentHelp("Reports a second, in all, of the window that measures CPU per report; below every deployment's saturation.",
                               valueName: "rate"))
    var costRate = 400.0

    @Option(help: "PostgreSQL deployments measured: one replica, two, and so on up to this many.")
    var replicas = 3

    private var chosenParts: Set<ServerBenchmark.Part>? {
        if parts == "all" { return Set(ServerBenchmark.Part.allCases) }
        let named = parts.split(separator: ",").map { ServerBenchmark.Part(rawValue: String($0)) }
        return named.contains(nil) || named.isEmpty ? nil : Set(named.compactMap { $0 })
    }

    func validate() throws {
        guard ["sqlite", "postgres", "all"].contains(engine) else { throw ValidationError("--engine is sqlite, postgres or all") }
        guard devices >= 2 * neighbours * processes, streams >= devices, processes >= 1, concurrency >= processes else {
            throw ValidationError("need --streams ≥ --devices ≥ 2 × --neighbours × --processes, and --concurrency ≥ --processes")
        }
        guard (1...8).contains(replicas) else { throw ValidationError("--replicas is from 1 to 8") }
        guard costRate > 0 else { throw ValidationError("--cost-rate is a number of reports a second above 0") }
        guard chosenParts != nil else { throw ValidationError("--parts is a comma-separated list of streams, sightings, upstream, or all") }
        guard upstreamDevices >= processes, upstreamDevices <= devices, upstreamInFlight >= 1, upstreamSessions >= 1 else {
            throw ValidationError("need --processes ≤ --upstream-devices ≤ --devices, and --upstream-in-flight and --upstream-sessions ≥ 1")
        }
    }

    func run() async throws {
        locations.apply()
        try await ServerBenchmark.run(ServerBenchmark.Settings(
            sqlite: engine != "postgres", postgres: engine != "sqlite", parts: chosenParts ?? [], devices: devices, streams: streams,
            processes: processes, concurrency: concurrency, neighbours: neighbours, seconds: seconds, warmUp: warmUp,
            upstreamDevices: upstreamDevices, upstreamInFlight: upstreamInFlight, upstreamSessions: upstreamSessions,
            seed: seed, costRate: costRate, replicas: replicas))
    }
}

struct Isolation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "One client's wait for answers while others flood nearbyd.",
        discussion: """
            A probe (bench/reference/latency_probe, C sd-bus, root) calls Properties.Get of nearbyd's \
            Version, then the reference C service's Register, one call at a time, a pair every \
            --interval µs, for --seconds: alone, under each load in turn, and alone again. The loads \
            (bench/isolation_load.py, dbus-next) are --connections connections of nobody's, then of \
            root's, with --window calls in flight each: SetPermission, CreateManager with a 30 MiB \
            argument (one at a time; also sent to the reference service instead, by root), \
            Publish/Unpublish, SendMessage with the direct channel open. Each row gives nearbyd's p50, \
            p99 and maximum, its p99 against the probe's alone, and the reference's under the same load.
            """)

    @OptionGroup var locations: Locations

    @Option(help: "Seconds each load is probed.")
    var seconds = 10.0

    @Option(help: ArgumentHelp("Microseconds between the probe's pairs of calls.", valueName: "us"))
    var interval = 2000

    @Option(help: "Connections of each load.")
    var connections = 3

    @Option(help: "Calls in flight on each load connection.")
    var window = 16

    @Option(name: .customLong("load"), help: ArgumentHelp(
        "Run only this load (repeatable; by default every one). The 30 MiB ratio alone: --load big-args --load big-args-reference (about a minute).",
        valueName: "load"))
    var loads: [IsolationBenchmark.Load] = []

    func run() async throws {
        locations.apply()
        try await IsolationBenchmark.run(locations: locations, seconds: seconds, interval: interval,
                                         connections: connections, window: window,
                                         loads: loads.isEmpty ? IsolationBenchmark.Load.allCases : loads)
    }
}

extension IsolationBenchmark.Load: ExpressibleByArgument {}

/// Percentiles of a sample, in the sample's unit.
struct Sample {
    private let sorted: [Double]

    init(_ values: [Double]) {
        sorted = values.sorted()
    }

    func percentile(_ p: Double) -> Double {
        sorted.isEmpty ? .nan : sorted[Int(p * Double(sorted.count - 1))]
    }

    var p50: Double { percentile(0.5) }
    var p99: Double { percentile(0.99) }
    var max: Double { sorted.last ?? .nan }
}

/// A line on standard error, for a long benchmark's watcher; the results go to standard output.
func progress(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Whether `done` came true within `seconds`, asked every quarter second:
/// what it looks at (files, /proc, other processes' state) tells nobody when
/// it changes.
func poll(within seconds: Double, _ done: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if try await done() { return true }
        try await Task.sleep(for: .milliseconds(250))
    }
    return false
}

/// User plus system CPU time of a process so far (/proc/PID/stat, fields 14 and 15).
func cpuSeconds(of pid: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let end = stat.lastIndex(of: ")") else { return 0 }
    // Fields after the command name, which may hold spaces: state is field 3.
    let fields = stat[stat.index(after: end)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
}

func format(_ value: Double, _ digits: Int = 1) -> String {
    String(format: "%.\(digits)f", value)
}
