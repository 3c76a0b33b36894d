import Foundation
import Testing
import TestSupport

/// The real nearby-server's XMPP endpoint, with its default `[xmpp]` limits,
/// under the flood of the attack report: 5,000 connections from 100 other
/// addresses (4,000 idle TCP connections, 500 dribbling a TLS ClientHello,
/// 500 dribbling a stream header after TLS), each opened again as soon as the
/// server closes it. Meanwhile an application server on slixmpp
/// (python/ccs_logins.py, on TestSupport's ccs_app.py) logs in six times, a
/// second apart, and sends a message each time: every login must succeed at
/// its first attempt, within 10 seconds.
///
/// The server's descriptors stay within its configured limits whatever the
/// flood (256 not yet authenticated, by default), so it runs under the
/// usual soft limit of 1,024; the flooder raises its own limit to hold 5,000.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct FloodTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let python = root.appendingPathComponent(".build/venv/bin/python").path
    static let rounds = 6

    static func script(_ name: String) -> String {
        root.appendingPathComponent("Tests/XMPPTests/python/\(name)").path
    }

    @Test func applicationServersLogInAndExchangeMessagesDuringAFloodOf5000Connections() async throws {
        let cluster = try await Cluster(options: Cluster.Options(xmpp: true))
        var children: [ChildProcess] = []
        do {
            let port = try #require(cluster.xmppPort)
            let keys = try await cluster.createProjectKeys("shop")
            let device = try await Self.registerDevice(cluster.serverURL, apiKey: keys.apiKey)

            let flood = try await ChildProcess(
                name: "flood", executable: Self.python,
                arguments: [Self.script("xmpp_flood.py"), "--port", "\(port)", "--domain", Cluster.xmppDomain,
                            "--sources", "127.0.1.1-127.0.1.100", "--idle", "4000", "--hello", "500", "--header", "500"],
                environment: ["PYTHONUNBUFFERED": "1"])
            children.append(flood)
            try await flood.waitForLine(containing: "flooding 4000 500 500", within: 240)
            // The flood holds at least every slot the server has for connections not yet logged in.
            let held = try await flood.lines.first(within: 60, "the flood to hold 256 connections") { line in
                line.hasPrefix("held ") && (Int(line.split(separator: " ")[1]) ?? 0) >= 256
            }

            let app = try await ChildProcess(
                name: "app-server", executable: Self.python,
                arguments: [Self.script("ccs_logins.py"), "--port", "\(port)", "--jid", "shop@\(Cluster.xmppDomain)",
                            "--key", keys.serverKey, "--ca", cluster.certificatePath, "--device=\(device)",
                            "--rounds", "\(Self.rounds)", "--timeout", "10", "--interval", "1"],
                environment: ["PYTHONUNBUFFERED": "1"])
            children.append(app)
            let status = try await app.waitForExit(within: Double(Self.rounds) * 15)
            let outcomes = app.lines.values.filter { $0.hasPrefix("round ") }
            #expect(status == 0, "\(app.output)")
            #expect(outcomes.count == Self.rounds && outcomes.allSatisfy { $0.contains(" ok ") }, "\(outcomes)")
            // Still flooding at the end, the server still closing what it floods
            // it with: the logins did not win by outlasting the flood.
            let lastReport = flood.lines.values.last { $0.hasPrefix("held ") } ?? ""
            #expect(flood.isRunning, "\(flood.output)")
            #expect(Self.closed(lastReport) > Self.closed(held), "\(held), then \(lastReport)")
            print("flood: \(held) before the logins, \(lastReport) after; logins: \(outcomes)")
        } catch {
            for child in children { child.signal(SIGKILL) }
            await cluster.stop()
            throw error
        }
        for child in children { child.signal(SIGKILL) }
        await cluster.stop()
    }

    /// M of the flood's "held N closed M".
    static func closed(_ report: String) -> Int {
        Int(report.split(separator: " ").last ?? "") ?? 0
    }

    /// Registers a device with curl, as any HTTP client would; returns its id.
    static func registerDevice(_ serverURL: String, apiKey: String) async throws -> String {
        let result = try await runProgram("/usr/bin/curl", ["-sS", "-X", "POST", "-H", "X-Api-Key: \(apiKey)", "\(serverURL)/v1/devices"])
        let object = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]
        return try #require(object?["device"] as? String, "\(result.output)")
    }
}
