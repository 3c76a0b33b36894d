import Foundation
import TestSupport

/// How long one client waits for nearbyd's answers while other clients
/// hammer it, against the same client's wait with nobody else there, and
/// against a minimal C service on the same bus under the same load (which
/// shows what the bus daemon and the shared machine add on their own).
enum IsolationBenchmark {
    /// What the other clients do (bench/isolation_load.py's modes).
    enum Load: String, CaseIterable, Sendable {
        case setPermission = "set-permission"
        case bigArguments = "big-args"
        /// The same calls to the reference service: what carrying 30 MiB costs
        /// the service that receives them, whatever it is.
        case bigArgumentsToReference = "big-args-reference"
        case publishChurn = "publish-churn"
        case sendFlood = "send-flood"

        var label: String {
            switch self {
            case .setPermission: "SetPermission, each written to disk"
            case .bigArguments: "CreateManager with a 30 MiB argument"
            case .bigArgumentsToReference: "the same 30 MiB calls, to the reference service (Register) instead"
            case .publishChurn: "Publish and Unpublish"
            case .sendFlood: "SendMessage, each written to disk"
            }
        }

        /// Whose clients make it: another user and the probe's own; only root
        /// may call the reference service (the bus's policy).
        var users: [LoadScripts.User] { self == .bigArgumentsToReference ? [.root] : [.nobody, .root] }
    }

    /// The project whose application server acks the flood's messages: its name is their recipient's sender id.
    static let project = "isolation"

    static func run(locations: Locations, seconds: Double, interval: Int, connections: Int, window: Int,
                    loads: [Load] = Load.allCases) async throws {
        try await LoadScripts.withCluster(Cluster.Options(
            daemonLogLevel: "info", xmpp: true, busPolicy: .sharedWithOtherUsers(including: [LoadScripts.busPolicy]))
        ) { cluster, scripts in
            try await measure(cluster, scripts, locations: locations, seconds: seconds, interval: interval,
                              connections: connections, window: window, loads: loads)
        }
    }

    private struct Row {
        let load: String
        let user: String
        let rate: Double?
        let ours: Sample
        let reference: Sample
        let errors: Int
        let answers: String
    }

    private static func measure(_ cluster: Cluster, _ scripts: LoadScripts, locations: Locations, seconds: Double,
                                interval: Int, connections: Int, window: Int, loads: [Load]) async throws {
        let keys = try await cluster.createProjectKeys(project)
        let device = try await cluster.addDevice("A")
        let reference = try await ChildProcess(name: "svc_sdbus", executable: locations.program("svc_sdbus"), arguments: ["probe.Ref"],
                                               environment: ["DBUS_SESSION_BUS_ADDRESS": device.busAddress])
        try await ThroughputBenchmark.waitForName("probe.Ref", on: device.busAddress)
        let appServer = try await UpstreamBenchmark.startAppServer(cluster, keys, project: project)
        let idle = try await Census.take(cluster, device)

        /// The probe's waits over `seconds`, in milliseconds.
        func probe() async throws -> (ours: Sample, reference: Sample, errors: Int) {
            let result = try await runProgram(locations.program("latency_probe"), ["\(seconds)", "\(interval)", "probe.Ref"],
                                              environment: ["DBUS_SESSION_BUS_ADDRESS": device.busAddress])
            let lines = result.output.split(separator: "\n")
            func values(_ label: String) throws -> [Double] {
                guard let line = lines.first(where: { $0.hasPrefix(label + " ") }) else {
                    throw ChildProcessError(message: "latency_probe printed no \(label): \(result.output)")
                }
                return line.split(separator: " ").dropFirst().compactMap { Double($0) }.map { $0 / 1000 }
            }
            let errors = lines.first { $0.hasPrefix("errors ") }.flatMap { Int($0.split(separator: " ").last ?? "") } ?? -1
            return (Sample(try values("nearbyd")), Sample(try values("reference")), errors)
        }

        var rows: [Row] = []
        let alone = try await probe()
        rows.append(Row(load: "none (the reference)", user: "", rate: nil, ours: alone.ours, reference: alone.reference,
                        errors: alone.errors, answers: ""))
        for load in Load.allCases where loads.contains(load) {
            for user in load.users {
                progress("isolation: \(load.rawValue) from \(user)'s clients")
                let process = try await scripts.start("isolation_load.py", [
                    load.rawValue, device.busAddress, "--key", keys.apiKey, "--to", "\(project)@\(Cluster.xmppDomain)",
                    "--connections", "\(connections)", "--window", "\(window)",
                ], as: user, name: "\(load.rawValue)-\(user)")
                try await process.waitForLine(containing: #""event": "running""#, within: 60)
                let measured = try await probe()
                process.signal(SIGTERM)
                let stopped = try jsonLine(try await process.waitForLine(containing: #""event": "stopped""#, within: 60))
                _ = try await process.waitForExit()
                var answers = Tally()
                answers.add(stopped["outcomes"])
                let calls = stopped["calls"] as? Int ?? 0, elapsed = stopped["seconds"] as? Double ?? 0
                rows.append(Row(load: load.label, user: user == .root ? "root (the probe's)" : "nobody (another)",
                                rate: elapsed > 0 ? Double(calls) / elapsed : nil, ours: measured.ours,
                                reference: measured.reference, errors: measured.errors, answers: answers.summary))
                try await settle(cluster, device, to: idle)
            }
        }
        let aloneAfter = try await probe()
        rows.append(Row(load: "none, again at the end", user: "", rate: nil, ours: aloneAfter.ours,
                        reference: aloneAfter.reference, errors: aloneAfter.errors, answers: ""))
        await appServer.stop()
        await reference.stop()

        // The 30 MiB flood aimed at nearbyd against the same flood aimed at the reference service, from the same user:
        // what each service's other callers wait at p99 (the goal: nearbyd's within 1.5 times).
        let floodRatio: String = {
            guard let ours = rows.first(where: { $0.load == Load.bigArguments.label && $0.user.hasPrefix("root") }),
                  let theirs = rows.first(where: { $0.load == Load.bigArgumentsToReference.label }) else { return "not measured" }
            let ratio = ours.ours.p99 / theirs.reference.p99
            return "\(format(ours.ours.p99, 2)) ms / \(format(theirs.reference.p99, 2)) ms = \(format(ratio, 2)) "
                + "(goal ≤ 1.5: \(ratio <= 1.5 ? "met" : "**not met**"))"
        }()
        let table = rows.map { row in
            "| \(row.load) | \(row.user) | \(row.rate.map { format($0, 0) } ?? "") | \(format(row.ours.p50, 2)) | "
                + "\(format(row.ours.p99, 2)) | \(format(row.ours.max, 1)) | \(format(row.ours.p99 / alone.ours.p99, 1)) | "
                + "\(format(row.reference.p50, 2)) | \(format(row.reference.p99, 2)) | \(row.ours.p99 <= 10 ? "yes" : "**no**") |"
        }
        print("""
            isolation: a probe client (root) asks nearbyd for Properties.Get of Version, then the reference C service \
            for Register, one call at a time, every \(interval) µs for \(format(seconds, 0)) s under each load; \
            each load is \(connections) connections of one user with \(window) calls in flight each (30 MiB calls: one).
            | load | its clients' user | load calls/s | nearbyd p50 ms | nearbyd p99 ms | nearbyd max ms | nearbyd p99 / alone | reference p50 ms | reference p99 ms | nearbyd p99 ≤ 10 ms |
            | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
            \(table.joined(separator: "\n"))
            30 MiB flood, nearbyd's callers' p99 when it is aimed at nearbyd / the reference's callers' p99 when it is aimed at the reference: \(floodRatio)
            probe calls answered with an error: \(rows.map(\.errors).reduce(0, +))
            the loads' answers:
            \(rows.filter { !$0.answers.isEmpty }.map { "- \($0.load), \($0.user): \($0.answers)" }.joined(separator: "\n"))
            """)
    }

    /// Until what a load left behind is gone (its messages sent and acked, its
    /// objects removed), so that the next load starts from the same state. (The
    /// verdicts its apps were not told stay in the outbox, as they would for
    /// any app that quits: they are kept for it.)
    private static func settle(_ cluster: Cluster, _ device: Cluster.Device, to idle: Census) async throws {
        var now = idle
        let settled = try await poll(within: 120) {
            now = try await Census.take(cluster, device)
            return now.outboxPending == 0 && now.objects <= idle.objects
        }
        guard settled else {
            throw ChildProcessError(message: "nearbyd did not settle within 120 s after a load: \(now.outboxPending) messages waiting in the outbox, "
                                        + "\(now.objects) objects (\(idle.objects) before)")
        }
    }
}
