import DBus
import Foundation
import TestSupport

/// Publish+Unpublish pairs per second from one pipelined client against
/// nearbyd, and Register calls per second against the reference C service,
/// on the same private bus, alternating.
enum ThroughputBenchmark {
    static func run(locations: Locations, pairs: Int, window: Int, rounds: Int) async throws {
        let cluster = try await Cluster(options: Cluster.Options(daemonLogLevel: "info"))
        // A real project: the daemon registers and keeps the server in step while it is measured.
        let key = try await cluster.createProject("throughput")
        let device = try await cluster.addDevice("A", at: (0, 0))
        let environment = ["DBUS_SESSION_BUS_ADDRESS": device.busAddress, "NEARBY_API_KEY": key]
        let reference = try await ChildProcess(name: "svc_sdbus", executable: locations.program("svc_sdbus"),
                                               arguments: ["probe.Ref"], environment: environment)
        try await waitForName("probe.Ref", on: device.busAddress)

        var ours: [Double] = [], oursPairs: [Double] = [], theirs: [Double] = [], ratios: [Double] = []
        var referenceCPU: [CPUPerCall] = [], ourCPU: [CPUPerCall] = []
        let calls = Double(2 * pairs)
        /// What the service and dbus-daemon spent on `run`'s calls, and its client by its own count.
        func cpu(of service: Int32, _ run: () async throws -> ProgramResult) async throws -> (ProgramResult, CPUPerCall) {
            let before = (cpuSeconds(of: service), cpuSeconds(of: device.bus.pid))
            let result = try await run()
            let after = (cpuSeconds(of: service), cpuSeconds(of: device.bus.pid))
            return (result, CPUPerCall(service: (after.0 - before.0) / calls * 1e6, bus: (after.1 - before.1) / calls * 1e6,
                                       client: try value("clientcpu", in: result.output)))
        }
        var lines: [String] = []
        for _ in 0..<rounds {
            let (referenceRun, referenceCost) = try await cpu(of: reference.pid) {
                try await runProgram(locations.program("bench"), ["call", "probe.Ref", "register", "\(2 * pairs)", "\(window)"],
                                     environment: environment)
            }
            theirs.append(try value("calls/s", in: referenceRun.output))
            let (ourRun, ourCost) = try await cpu(of: device.daemon.pid) {
                try await runProgram(locations.program("pairs"), ["\(pairs)", "\(window)"], environment: environment)
            }
            referenceCPU.append(referenceCost)
            ourCPU.append(ourCost)
            ours.append(try value("calls/s", in: ourRun.output))
            oursPairs.append(try value("pairs/s", in: ourRun.output))
            // Each round's runs follow each other: their ratio cancels slow drifts of the machine.
            ratios.append(ours[ours.count - 1] / theirs[theirs.count - 1])
            lines = [referenceRun.output, ourRun.output]
        }
        await reference.stop()
        await cluster.stop()

        let median = { (values: [Double]) in Sample(values).p50 }
        let cpuRow = { (runs: [CPUPerCall]) in
            [\CPUPerCall.service, \.bus, \.client].map { party in format(median(runs.map { $0[keyPath: party] }), 2) }
                .joined(separator: " | ")
        }
        print("""
            D-Bus throughput, one client, \(window) in flight, medians of \(rounds) rounds (reference, then nearbyd):
            | service | calls/s | pairs/s | ratio to reference calls/s (median of the rounds' ratios) |
            | --- | --- | --- | --- |
            | reference C sd-bus service (Register) | \(format(median(theirs), 0)) | | 1.00 |
            | nearbyd (Publish + Unpublish) | \(format(median(ours), 0)) | \(format(median(oursPairs), 0)) | \(format(median(ratios), 2)) (rounds: \(ratios.map { format($0, 2) }.joined(separator: ", "))) |

            CPU per call (µs, medians of the rounds): the ratio follows the service's, which \
            makes dbus-daemon and the client spend more too once the service limits the calls (doc/performance.md):
            | phase | service | dbus-daemon | client |
            | --- | --- | --- | --- |
            | reference (svc_sdbus) | \(cpuRow(referenceCPU)) |
            | nearbyd | \(cpuRow(ourCPU)) |
            last round, raw:
            \(lines.joined())
            """)
    }

    /// µs of CPU per call of each party in one phase of a round.
    private struct CPUPerCall {
        var service: Double
        var bus: Double
        /// The load client's, as it reports it.
        var client: Double
    }

    /// The number after `name=` in a load client's report.
    private static func value(_ name: String, in output: String) throws -> Double {
        guard let range = output.range(of: name + "="),
              let number = Double(output[range.upperBound...].drop { $0 == " " }.prefix { $0.isNumber || $0 == "." }) else {
            throw ChildProcessError(message: "no \(name) in: \(output)")
        }
        return number
    }

    /// Polls the bus until `name` has an owner: the reference service says nothing when ready.
    @BusActor
    static func waitForName(_ name: String, on address: String) async throws {
        let connection = try BusConnection(.address(address))
        defer { connection.close() }
        for _ in 0..<500 {
            let owned = try await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameHasOwner", arguments: { writer throws(DBusError) in try writer.append(name) }
            ) { reader throws(DBusError) in try reader.read(Bool.self) }
            if owned { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw ChildProcessError(message: "\(name) never appeared on the bus")
    }
}
