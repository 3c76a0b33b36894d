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
                       driven by C sd-bus load clients.
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

            The programs come from --bin (a release build: make bench), the C programs
            from --reference (bench/reference/build.sh). Results go to stdout as
            Markdown rows for doc/performance.md.
            """,
        subcommands: [All.self, Discovery.self, Throughput.self, Memory.self, Scan.self, Upstream.self],
        defaultSubcommand: All.self
    )
}

struct Locations: ParsableArguments {
    @Option(help: ArgumentHelp("Directory of the built programs.", valueName: "dir"))
    var bin = ".build/release"

    @Option(help: ArgumentHelp("Directory of the C reference programs.", valueName: "dir"))
    var reference = "bench/reference/bin"

    func apply() {
        setenv("NEARBYD_BIN_DIR", URL(fileURLWithPath: bin).standardizedFileURL.path, 1)
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
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
}

func format(_ value: Double, _ digits: Int = 1) -> String {
    String(format: "%.\(digits)f", value)
}
