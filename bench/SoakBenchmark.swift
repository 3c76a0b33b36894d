import Foundation
import TestSupport

/// Churn and soak: thousands of D-Bus clients come and go through one
/// nearbyd, a thousand devices register with nearby-server and vanish, and
/// application servers connect and drop, all at once; then, after a quiet
/// period, nothing may be left that was not there before: no object, row or
/// descriptor, and resident memory within 10 % of its baseline. The baseline
/// is taken after a smaller round of the same churn, so that what is made
/// once and kept (each user's registration with the server, the outbox's
/// database, the decisions about the apps) is in it.
enum SoakBenchmark {
    struct Settings: Sendable {
        /// D-Bus clients over the run.
        var clients = 10_000
        /// Devices registering with the server's HTTP API over the run.
        var devices = 1_000
        /// Rounds the clients and devices are split into, each measured: what
        /// a round leaves that the next adds to is a leak, what stays the same
        /// is a high-water mark.
        var rounds = 2
        /// root's clients connected at once.
        var concurrency = 40
        /// Clients in each process that is killed (nobody's).
        var killedTogether = 16
        var seed = 1
        /// Seconds of quiet before each measurement: longer than
        /// AsyncHTTPClient's 60 s idle timeout, after which nearbyd's pooled
        /// connections to the server close.
        var quiet = 70.0
        /// Seconds until a device's publication and subscription expire.
        var deviceTTL = 30
    }

    /// AppIds the clients share, as apps restarted many times would.
    static let apps = 8
    /// The XMPP sender id of the project whose clients send upstream: its name.
    static let upstreamProject = "soak"

    static func run(_ settings: Settings) async throws {
        // Tokens outlive the run, so that devices' reports of nearbyd's tokens stay valid throughout.
        // Every device registers from one loopback address, at the soak's pace: registration's rate
        // limits are raised to their maximum (they are the server's defence, not what is measured).
        try await LoadScripts.withCluster(Cluster.Options(
            serverConfiguration: """
                [tokens]
                lifetime-seconds = 7200
                [limits]
                registrations-per-address-per-minute = 60000
                registrations-per-project-per-minute = 600000

                """, daemonLogLevel: "info", xmpp: true,
            busPolicy: .sharedWithOtherUsers(including: [LoadScripts.busPolicy]))) { cluster, scripts in
            try await soak(settings, cluster, scripts)
        }
    }

    private static func soak(_ settings: Settings, _ cluster: Cluster, _ scripts: LoadScripts) async throws {
        let upstream = try await cluster.createProjectKeys(upstreamProject)
        let otherKey = try await cluster.createProject("soak-b")
        let device = try await cluster.addDevice("A")
        progress("soak: warm-up")
        var world = World(cluster: cluster, device: device, scripts: scripts, upstream: upstream,
                          keys: [upstream.apiKey, otherKey], settings: settings, nearbydDevices: [])
        let warmUp = try await world.churn(clients: 320, devices: 100, silentShare: 0, first: 0, seed: settings.seed * 1000)
        _ = try await world.drainAndSettle(to: nil)
        // What is registered now is nearbyd's: one device per user and API key. The devices of the run hear their tokens.
        world.nearbydDevices = try await Census.devices(cluster)
        try await Task.sleep(for: .seconds(settings.quiet))
        let baseline = try await Census.take(cluster, device)

        var rounds: [(report: ChurnReport, peak: Int, settled: Double?, census: Census)] = []
        for round in 1...settings.rounds {
            progress("soak: round \(round) of \(settings.rounds)")
            let report = try await world.churn(clients: settings.clients / settings.rounds,
                                               devices: settings.devices / settings.rounds, silentShare: 0.5,
                                               first: 1_000_000 * round, seed: settings.seed * 1000 + round)
            let peak = try Census.resources(of: device.daemon.pid).peakResidentKiB
            progress("soak: draining and settling")
            let settled = try await world.drainAndSettle(to: baseline)
            try await Task.sleep(for: .seconds(settings.quiet))
            rounds.append((report, peak, settled, try await Census.take(cluster, device)))
        }

        let after = rounds[rounds.count - 1].census
        let figures = SoakFigures(baseline: baseline, rounds: rounds.map(\.census),
                                  silentDevices: rounds.map { $0.report.devices["silent"] }.reduce(0, +))
        let described = rounds.enumerated().map { index, round in
            "round \(index + 1): \(round.report.describe(settings)) in \(format(round.report.seconds, 0)) s; drained and settled "
                + (round.settled.map { "in \(format($0, 1)) s" } ?? "NOT within the time allowed")
                + "; nearbyd's peak resident memory \(format(Double(round.peak) / 1024)) MiB\n"
                + "  calls: \(round.report.outcomes.summary)\n  signals and leaving: \(round.report.events.summary)\n"
                + "  devices: \(round.report.devices.summary)"
        }
        print("""
            soak: \(settings.clients) D-Bus clients and \(settings.devices) devices in \(settings.rounds) rounds, after a \
            warm-up of \(warmUp.clients) clients and \(warmUp.devices["register 201"]) devices; each figure taken after \
            \(format(settings.quiet, 0)) s of quiet.
            \(described.joined(separator: "\n"))
            \(figures.table)
            threads by name, baseline→after: nearbyd: \(after.nearbyd.threadChanges(since: baseline.nearbyd)); \
            nearby-server: \(after.server.threadChanges(since: baseline.server))
            """)
        let failed = figures.failed
        guard failed.isEmpty else { throw SoakFailed(figures: failed) }
    }
}

/// Figures the soak found over their limit.
struct SoakFailed: Error, CustomStringConvertible {
    let figures: [String]
    var description: String { "left after the soak: \(figures.joined(separator: "; "))" }
}

/// What one round of churn did.
struct ChurnReport: Sendable {
    var clients = 0
    var killedProcesses = 0
    var killedClients = 0
    var outcomes = Tally()
    var events = Tally()
    var devices = Tally()
    var appServerSessions = 0
    var seconds = 0.0

    func describe(_ settings: SoakBenchmark.Settings) -> String {
        "\(clients) D-Bus clients (\(events["left cleanly"]) left cleanly, \(events["closed its connection"]) closed their "
            + "connection, \(killedClients) killed in \(killedProcesses) processes of \(settings.killedTogether)), "
            + "\(devices["register 201"]) devices registered (\(devices["delete 204"]) deleted, \(devices["silent"]) went silent, "
            + "\(devices["register 429"]) registrations answered 429), \(appServerSessions) application server sessions"
    }
}

/// The soak's programs and the loads it drives through them.
private struct World: Sendable {
    let cluster: Cluster
    let device: Cluster.Device
    let scripts: LoadScripts
    let upstream: Cluster.ProjectKeys
    let keys: [String]
    let settings: SoakBenchmark.Settings
    /// nearbyd's registrations with the server, whose tokens the devices report hearing.
    var nearbydDevices: [String]

    /// `clients` D-Bus clients (a fifth of them killed; half of all leave
    /// cleanly, the rest close their connection), `devices` devices and
    /// application servers coming and going while they do, all at once.
    func churn(clients: Int, devices: Int, silentShare: Double, first: Int, seed: Int) async throws -> ChurnReport {
        let start = ContinuousClock.now
        let killed = clients / 5 / settings.killedTogether * settings.killedTogether
        let finished = Inbox<Void>()
        async let sessions = appServers(until: finished)
        let report: ChurnReport
        do {
            async let churned = self.churned(clients - killed, cleanShare: Double(clients / 2) / Double(clients - killed),
                                             first: first, seed: seed)
            async let victims = self.killed(killed, first: first + clients - killed, seed: seed)
            async let registered = self.devices(devices, silentShare: silentShare, seed: seed)
            var combined = try await churned
            let (held, heldOutcomes) = try await victims
            combined.killedProcesses = held
            combined.killedClients = killed
            combined.clients = clients
            combined.outcomes.add(heldOutcomes.counts)
            combined.devices = try await registered
            report = combined
        } catch {
            finished.put(())
            _ = try? await sessions
            throw error
        }
        finished.put(())
        var result = report
        result.appServerSessions = try await sessions
        result.seconds = milliseconds(.now - start) / 1000
        return result
    }

    private var bus: String { device.busAddress }

    private func clientArguments(_ mode: String, first: Int, count: Int, seed: Int) -> [String] {
        [mode, bus, "--keys", keys.joined(separator: ","), "--apps", "\(SoakBenchmark.apps)", "--clients", "\(count)",
         "--first", "\(first)", "--seed", "\(seed)", "--upstream-key", upstream.apiKey,
         "--upstream-to", "\(SoakBenchmark.upstreamProject)@\(Cluster.xmppDomain)"]
    }

    /// root's clients, `concurrency` at once, in processes of 500 one after another.
    private func churned(_ count: Int, cleanShare: Double, first: Int, seed: Int) async throws -> ChurnReport {
        var report = ChurnReport()
        var next = first
        while next < first + count {
            let chunk = min(500, first + count - next)
            let process = try await scripts.start(
                "soak_clients.py",
                clientArguments("churn", first: next, count: chunk, seed: seed)
                    + ["--concurrency", "\(settings.concurrency)", "--release-share", "\(cleanShare)"],
                as: .root, name: "clients")
            let done = try jsonLine(try await process.waitForLine(containing: #""event": "done""#, within: 1800))
            _ = try await process.waitForExit()
            report.outcomes.add(done["outcomes"])
            report.events.add(done["events"])
            next += chunk
        }
        return report
    }

    /// nobody's clients, `killedTogether` at a time in one process, killed
    /// (SIGKILL) once they have published and subscribed.
    private func killed(_ count: Int, first: Int, seed: Int) async throws -> (processes: Int, outcomes: Tally) {
        var outcomes = Tally()
        var processes = 0
        var next = first
        while next < first + count {
            let process = try await scripts.start(
                "soak_clients.py", clientArguments("hold", first: next, count: settings.killedTogether, seed: seed),
                as: .nobody, name: "held")
            let holding = try jsonLine(try await process.waitForLine(containing: #""event": "holding""#, within: 300))
            process.signal(SIGKILL)
            _ = try await process.waitForExit()
            outcomes.add(holding["outcomes"])
            processes += 1
            next += settings.killedTogether
        }
        return (processes, outcomes)
    }

    /// Devices through the server's HTTP API; they report hearing nearbyd's tokens.
    private func devices(_ count: Int, silentShare: Double, seed: Int) async throws -> Tally {
        let tokens = try await Census.liveTokens(cluster, of: nearbydDevices)
        let process = try await scripts.start("soak_devices.py", [
            cluster.serverURL, upstream.apiKey, "--devices", "\(count)", "--concurrency", "20", "--seed", "\(seed)",
            "--silent-share", "\(silentShare)", "--ttl", "\(settings.deviceTTL)", "--hear", tokens.joined(separator: ","),
        ], as: .root, name: "devices")
        let done = try jsonLine(try await process.waitForLine(containing: #""event": "done""#, within: 3600))
        _ = try await process.waitForExit()
        var counts = Tally()
        counts.add(done["counts"])
        return counts
    }

    /// Application servers of the upstream project, one at a time, each
    /// logging in, acking for one to four seconds, and dropping (SIGTERM and
    /// SIGKILL in turn), until `finished`; how many sessions there were.
    private func appServers(until finished: Inbox<Void>) async throws -> Int {
        var sessions = 0
        while finished.values.isEmpty {
            let server = try await UpstreamBenchmark.startAppServer(cluster, upstream, project: SoakBenchmark.upstreamProject)
            // Its life, cut short when the churn is over.
            _ = try? await finished.first(within: Double(1 + sessions % 4), "the churn to end") { _ in true }
            server.signal(sessions % 2 == 0 ? SIGTERM : SIGKILL)
            _ = try await server.waitForExit()
            sessions += 1
        }
        return sessions
    }

    /// With an application server connected and every app of both users
    /// back (soak_clients.py drain), until the outbox is empty; then, once
    /// they have gone, until nearbyd's objects and the server's publications
    /// and subscriptions are back to `baseline` (or simply still, for the
    /// warm-up). The seconds that took, nil if not within the time allowed.
    func drainAndSettle(to baseline: Census?) async throws -> Double? {
        let start = ContinuousClock.now
        let appServer = try await UpstreamBenchmark.startAppServer(cluster, upstream, project: SoakBenchmark.upstreamProject)
        var drains: [ChildProcess] = []
        for user in LoadScripts.User.allCases {
            let drain = try await scripts.start("soak_clients.py", clientArguments("drain", first: 0, count: 0, seed: 0),
                                                as: user, name: "drain-\(user)")
            try await drain.waitForLine(containing: #""event": "draining""#, within: 60)
            drains.append(drain)
        }
        let drained = try await poll(within: 180) { try await Census.take(cluster, device).outbox == 0 }
        for drain in drains { await drain.stop() }
        await appServer.stop()
        // Devices' objects expire after their TTL; nearbyd's go as the bus tells it its clients left.
        let settled = try await poll(within: Double(settings.deviceTTL) + 60) {
            let now = try await Census.take(cluster, device)
            guard let baseline else { return now.rows["publication"] == 0 && now.rows["subscription"] == 0 }
            return now.objects <= baseline.objects && now.connections <= baseline.connections
                && now.outbox <= baseline.outbox && now.rows["publication"]! <= baseline.rows["publication"]!
                && now.rows["subscription"]! <= baseline.rows["subscription"]!
        }
        return drained && settled ? milliseconds(.now - start) / 1000 : nil
    }
}

/// Each figure at the baseline and after each round, with what it may be
/// after the last.
private struct SoakFigures {
    enum Limit {
        /// No more than at the baseline.
        case none
        /// At most this share over the baseline.
        case share(Double)
        /// At most this many more than at the baseline, and why.
        case allowance(Int, String)
        /// Not judged, and why.
        case shown(String)
    }

    struct Figure {
        let name: String
        let before: Int
        let rounds: [Int]
        let limit: Limit
        var unit: (Int) -> String = { "\($0)" }

        var after: Int { rounds.last ?? before }

        var allowed: Int? {
            switch limit {
            case .none: before
            case .share(let share): Int((Double(before) * (1 + share)).rounded(.down))
            case .allowance(let extra, _): before + extra
            case .shown: nil
            }
        }

        var passed: Bool { allowed.map { after <= $0 } ?? true }
    }

    let figures: [Figure]
    let roundCount: Int

    init(baseline: Census, rounds: [Census], silentDevices: Int) {
        roundCount = rounds.count
        let mib: (Int) -> String = { format(Double($0) / 1024) }
        func figure(_ name: String, _ limit: Limit, unit: @escaping (Int) -> String = { "\($0)" },
                    _ value: (Census) -> Int) -> Figure {
            Figure(name: name, before: value(baseline), rounds: rounds.map(value), limit: limit, unit: unit)
        }
        let pool = "libdispatch's worker threads, started when work is queued and ended when idle"
        var figures = [
            figure("nearbyd resident memory (VmRSS), MiB", .share(0.10), unit: mib) { $0.nearbyd.residentKiB },
            figure("of which heap and stacks (RssAnon), MiB", .shown("the part that would show a leak"), unit: mib) {
                $0.nearbyd.anonymousKiB
            },
            figure("nearbyd descriptors", .none) { $0.nearbyd.descriptors },
            figure("of which TCP connections", .shown("to nearby-server: its links, direct channel and idle pooled HTTP")) {
                $0.nearbyd.tcpConnections
            },
            figure("nearbyd threads, libdispatch's pool aside", .none) { $0.nearbyd.threads - $0.nearbyd.poolThreads },
            figure("nearbyd threads of libdispatch's pool", .shown(pool)) { $0.nearbyd.poolThreads },
            figure("nearbyd objects on the bus", .none) { $0.objects },
            figure("nearbyd outbox: messages waiting", .none) { $0.outboxPending },
            figure("nearbyd outbox: verdicts not yet told", .none) { $0.outboxVerdicts },
            figure("nearbyd permission decisions", .none) { $0.decisions },
            figure("connections on the device's bus", .none) { $0.connections },
            figure("nearby-server resident memory (VmRSS), MiB", .share(0.10), unit: mib) { $0.server.residentKiB },
            figure("of which heap and stacks (RssAnon), MiB", .shown("the part that would show a leak"), unit: mib) {
                $0.server.anonymousKiB
            },
            figure("nearby-server descriptors", .none) { $0.server.descriptors },
            figure("of which TCP connections", .shown("nearbyd's, counted on both ends")) { $0.server.tcpConnections },
            figure("nearby-server threads, libdispatch's pool aside", .none) { $0.server.threads - $0.server.poolThreads },
            figure("nearby-server threads of libdispatch's pool", .shown(pool)) { $0.server.poolThreads },
            figure("nearby-server database and its WAL, KiB", .shown("grows with the rows kept")) { $0.databaseKiB },
        ]
        let kept: [String: Limit] = [
            "device": .allowance(silentDevices, "the devices that went silent: expired only after [limits] device-idle-days"),
            "token": .shown("kept a day past expiry (the silent devices' too)"),
            "upstream settled": .shown("kept with their verdict until a day after they expire"),
            "deletedDevice": .shown("every deleted device's id, kept [limits] deleted-device-days"),
        ]
        for (name, _) in Census.serverQueries {
            figures.append(figure("server rows: \(name)", kept[name] ?? .none) { $0.rows[name] ?? 0 })
        }
        self.figures = figures
    }

    var failed: [String] {
        figures.filter { !$0.passed }.map { "\($0.name) \($0.unit($0.before)) → \($0.unit($0.after))" }
    }

    var table: String {
        let rows = figures.map { figure -> String in
            let ratio = figure.before == 0 ? (figure.after == 0 ? "1.00" : "—") : format(Double(figure.after) / Double(figure.before), 2)
            let limit: String
            switch figure.limit {
            case .none: limit = "≤ baseline"
            case .share(let share): limit = "≤ baseline + \(Int(share * 100)) %"
            case .allowance(let extra, let why): limit = "≤ baseline + \(extra): \(why)"
            case .shown(let why): limit = "not judged: \(why)"
            }
            let verdict = figure.allowed == nil ? "" : figure.passed ? "ok" : "**LEFT**"
            let values = ([figure.before] + figure.rounds).map(figure.unit).joined(separator: " | ")
            return "| \(figure.name) | \(values) | \(ratio) | \(limit) | \(verdict) |"
        }
        let rounds = (1...max(roundCount, 1)).map { "after round \($0)" }
        return (["| figure | baseline | \(rounds.joined(separator: " | ")) | last / baseline | limit | |",
                 "| --- | --- | \(rounds.map { _ in "---" }.joined(separator: " | ")) | --- | --- | --- |"] + rows)
            .joined(separator: "\n")
    }
}
