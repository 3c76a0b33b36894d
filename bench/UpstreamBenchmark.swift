import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NearbyMessages
import Synchronization
import TestSupport

/// Upstream messages end to end on loopback: `SendMessage` on a device, the
/// daemon's outbox, the direct channel, nearby-server's connection server, a
/// slixmpp application server that acks, and back to `SendSucceeded`. One
/// sender, then many at once; against the round trips the path cannot avoid.
enum UpstreamBenchmark {
    static func run(messages: Int, senders: Int, total: Int) async throws {
        // The senders are managers of one client (NearbyMessages shares a bus
        // connection per address), so the daemon must allow that many per client.
        let cluster = try await Cluster(options: Cluster.Options(
            extraConfiguration: "[limits]\nmax-managers-per-client = \(max(senders, 16))\n", daemonLogLevel: "info", xmpp: true))
        defer { Task { await cluster.stop() } }
        let keys = try await cluster.createProjectKeys("bench")
        let device = try await cluster.addDevice("A")
        let appServer = try await startAppServer(cluster, keys)

        // One manager per app, all on the same API key, each with its own AppId.
        let verdicts = Verdicts()
        let connected = Inbox<Bool>()
        var made: [MessageManager] = []
        for index in 0..<senders {
            let handlers = UpstreamHandlers(
                sendSucceeded: { verdicts.settle($0, .success(.now)) },
                sendFailed: { verdicts.settle($0.messageID, .failure($0)) },
                directChannelConnectedChanged: { if index == 0 { connected.put($0) } })
            made.append(try await MessageManager(apiKey: keys.apiKey, appId: "org.example.bench\(index)",
                                                 bus: .address(device.busAddress), upstream: handlers))
        }
        let managers = made
        try await managers[0].setDirectChannel(true)
        _ = try await connected.first(within: 20, "the direct channel") { $0 }
        let to = "bench@\(Cluster.xmppDomain)"

        /// Sends `count` messages from `manager`, each after the previous one's
        /// `SendSucceeded`; the latency of each in milliseconds.
        @Sendable func sendInTurn(_ manager: MessageManager, _ sender: Int, _ phase: String, _ count: Int) async throws -> [Double] {
            var latencies: [Double] = []
            latencies.reserveCapacity(count)
            for index in 0..<count {
                let id = "\(phase)-\(sender)-\(index)"
                let sent = ContinuousClock.now
                try await manager.sendUpstream(data: ["n": "\(index)"], to: to, messageID: id, ttlSeconds: 600)
                latencies.append(milliseconds(try await verdicts.wait(id) - sent))
            }
            return latencies
        }

        /// Every manager sends `each` in turn, all at once; the latencies and the seconds from first send to last verdict.
        @Sendable func sendTogether(_ phase: String, _ each: Int) async throws -> (latencies: [Double], seconds: Double) {
            let start = ContinuousClock.now
            let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
                for (sender, manager) in managers.enumerated() {
                    group.addTask { try await sendInTurn(manager, sender, phase, each) }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            return (latencies, milliseconds(.now - start) / 1000)
        }

        let warmUp = 50
        let (oneSender, manySenders) = try await withTimeout(300, "the upstream messages") {
            _ = try await sendInTurn(managers[0], 0, "warm", warmUp)
            let start = ContinuousClock.now
            let one = try await sendInTurn(managers[0], 0, "one", messages)
            let oneSeconds = milliseconds(.now - start) / 1000
            _ = try await sendTogether("warm-many", 1)
            let many = try await sendTogether("many", total / senders)
            return ((one, oneSeconds), many)
        }

        // The floor: one D-Bus round trip to the daemon, one HTTP request to
        // the server, and one XMPP round trip from the application server
        // (dry_run: TLS, XMPP and the CCS layer, no device).
        var local: [Double] = []
        let health = URL(string: cluster.serverURL + "/v1/health")!
        for _ in 0..<messages {
            let start = ContinuousClock.now
            _ = try await managers[0].directChannelConnected
            _ = try await URLSession.shared.data(from: health)
            local.append(milliseconds(.now - start))
        }
        let registration = try await appServer.waitForLine(containing: "device ").split(separator: " ").last.map(String.init) ?? ""
        let xmpp = try await measureXMPP(cluster, keys, to: registration, count: messages, window: senders)
        let fsyncs = try measureFsync(in: cluster.directory, count: messages)
        await appServer.stop()
        await cluster.stop()

        let oneSample = Sample(oneSender.0), manySample = Sample(manySenders.latencies)
        let localSample = Sample(local), xmppSample = Sample(xmpp.rtts), fsyncSample = Sample(fsyncs)
        let floor = localSample.p50 + xmppSample.p50
        let oneRate = Double(messages) / oneSender.1, manyRate = Double(manySenders.latencies.count) / manySenders.seconds
        print("""
            upstream SendMessage → SendSucceeded on loopback, \(messages) messages from one sender (after \(warmUp) warm-up), \
            \(manySenders.latencies.count) from \(senders) senders at once (after one each):
            | measure | messages/s | p50 ms | p99 ms | p50 / floor | messages/s / reference |
            | --- | --- | --- | --- | --- | --- |
            | one sender, in turn | \(format(oneRate, 0)) | \(format(oneSample.p50, 2)) | \(format(oneSample.p99, 2)) | \(format(oneSample.p50 / floor, 2)) | |
            | \(senders) senders, each in turn | \(format(manyRate, 0)) | \(format(manySample.p50, 2)) | \(format(manySample.p99, 2)) | \(format(manySample.p50 / floor, 2)) | \(format(manyRate / xmpp.rate, 2)) |
            | floor: D-Bus Get + HTTP GET | | \(format(localSample.p50, 2)) | \(format(localSample.p99, 2)) | | |
            | floor: XMPP dry-run downstream → ack, one at a time | | \(format(xmppSample.p50, 2)) | \(format(xmppSample.p99, 2)) | | |
            | floor, sum of the p50s | | \(format(floor, 2)) | | 1.00 | |
            | reference: XMPP dry runs, \(senders) in flight, one connection | \(format(xmpp.rate, 0)) | | | | 1.00 |
            | not in the floor: write + fsync of 100 bytes in the state directory's file system | | \(format(fsyncSample.p50, 2)) | \(format(fsyncSample.p99, 2)) | | |
            """)
    }

    /// bench/ccs_appserver.py acking every upstream message of `project`
    /// (whose keys are `keys`), on the project's Python environment.
    static func startAppServer(_ cluster: Cluster, _ keys: Cluster.ProjectKeys, project: String = "bench") async throws -> ChildProcess {
        let server = try await ChildProcess(name: "app-server", executable: python,
                                            arguments: appServerArguments(cluster, keys, project: project),
                                            environment: ["PYTHONUNBUFFERED": "1"])
        try await server.waitForLine(containing: "ready")
        return server
    }

    /// Dry-run downstream round trips from a second application server
    /// connection, one at a time and `window` in flight.
    private static func measureXMPP(_ cluster: Cluster, _ keys: Cluster.ProjectKeys, to registration: String,
                                    count: Int, window: Int) async throws -> (rtts: [Double], rate: Double) {
        let result = try await runProgram(python, appServerArguments(cluster, keys)
                                              + ["--dry-run-to", registration, "--count", "\(count)", "--window", "\(window)"])
        let lines = result.output.split(separator: "\n")
        guard let rtts = lines.first(where: { $0.hasPrefix("rtt ") })?.split(separator: " ").dropFirst().compactMap({ Double($0) }),
              rtts.count == count,
              let rate = lines.first(where: { $0.hasPrefix("rate ") })?.split(separator: " ").last.flatMap({ Double($0) }) else {
            throw ChildProcessError(message: "the XMPP floor failed: \(result.output)")
        }
        return (rtts, rate)
    }

    /// Writes and fsyncs a small file `count` times: what a durable write costs
    /// on this disk (the outbox takes a synchronous SQLite transaction per
    /// message accepted and per verdict).
    private static func measureFsync(in directory: TemporaryDirectory, count: Int) throws -> [Double] {
        let url = URL(fileURLWithPath: directory.file("fsync-probe"))
        try Data().write(to: url)
        let file = try FileHandle(forWritingTo: url)
        defer { try? file.close() }
        let record = Data(repeating: 0x2a, count: 100)
        return try (0..<count).map { _ in
            let start = ContinuousClock.now
            try file.write(contentsOf: record)
            try file.synchronize()
            return milliseconds(.now - start)
        }
    }

    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    private static let python = root.appendingPathComponent(".build/venv/bin/python").path

    private static func appServerArguments(_ cluster: Cluster, _ keys: Cluster.ProjectKeys, project: String = "bench") -> [String] {
        [root.appendingPathComponent("bench/ccs_appserver.py").path, "--port", "\(cluster.xmppPort ?? 0)",
         "--jid", "\(project)@\(Cluster.xmppDomain)", "--key", keys.serverKey, "--ca", cluster.certificatePath]
    }
}

/// The verdicts of upstream messages by message id, each with the instant its
/// signal was read: whichever comes first, the verdict or the wait for it.
private final class Verdicts: Sendable {
    private typealias Verdict = Result<ContinuousClock.Instant, any Error>

    private struct State {
        var arrived: [String: Verdict] = [:]
        var waiting: [String: CheckedContinuation<ContinuousClock.Instant, any Error>] = [:]
    }

    private let state = Mutex(State())

    /// Called on the bus thread: the instant is taken there, before any task hop.
    func settle(_ id: String, _ verdict: Result<ContinuousClock.Instant, UpstreamFailure>) {
        let verdict = verdict.mapError { $0 as any Error }
        let waiter = state.withLock { state -> CheckedContinuation<ContinuousClock.Instant, any Error>? in
            if let waiter = state.waiting.removeValue(forKey: id) { return waiter }
            state.arrived[id] = verdict
            return nil
        }
        waiter?.resume(with: verdict)
    }

    /// When `id` succeeded; throws its ``UpstreamFailure`` if it failed, and
    /// gives up when the task is cancelled (a timeout).
    func wait(_ id: String) async throws -> ContinuousClock.Instant {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let verdict: Verdict? = state.withLock { state in
                    if let verdict = state.arrived.removeValue(forKey: id) { return verdict }
                    // Checked under the lock that onCancel takes, so a waiter is never left behind.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiting[id] = continuation
                    return nil
                }
                if let verdict { continuation.resume(with: verdict) }
            }
        } onCancel: {
            state.withLock { $0.waiting.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }
}
