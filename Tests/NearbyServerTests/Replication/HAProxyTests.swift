import Foundation
import ServerAPI
import Testing
import TestSupport

/// The shipped dist/haproxy/nearby-server.cfg in front of three real
/// replicas on one PostgreSQL database, as an operator runs it: one port
/// for every replica in turn, one port for each replica alone (its
/// `[replication] advertised-url`), and a PROXY protocol v2 header on every
/// connection to a replica (`[http] proxy-protocol-from`). The client is
/// curl, or raw sockets where a connection must be held open; loopback
/// addresses other than haproxy's (127.0.0.2, 127.0.0.3) stand for other
/// devices' addresses.
@Suite(.enabled(if: HAProxy.isInstalled,
                "needs haproxy (/usr/sbin/haproxy): `make setup` installs it"),
       .postgresCluster, .serialized, .timeLimit(.minutes(3)))
struct HAProxyTests {
    /// Three replicas behind one haproxy, all of them checked healthy by it.
    struct Deployment {
        let database: String
        let replicas: [ServerProcess]
        let haproxy: ChildProcess
        /// haproxy's ports: the shared one, then replica i's own at i + 1.
        let ports: [Int]

        /// nearbyd's `[server] url`: any replica, in turn.
        var sharedURL: String { "http://127.0.0.1:\(ports[0])" }
        /// Each replica's own port at haproxy: its advertised-url.
        var replicaURLs: [String] { ports.dropFirst().map { "http://127.0.0.1:\($0)" } }
    }

    /// What curl prints (its -w format, or the body), each call bounded by
    /// --max-time. A connection that fails prints `000` for %{http_code}.
    static func curl(_ arguments: [String]) async throws -> String {
        try await runProgram("/usr/bin/curl", ["-s", "--max-time", "10"] + arguments).output
    }

    /// Runs `body` against three replicas (each at most two busy connections
    /// from one address) behind haproxy, once the replicas hold 86, 85 and
    /// 85 partitions and haproxy's health checks have passed on each:
    /// nothing moves while `body` runs.
    static func withReplicasBehindHAProxy(_ body: (Deployment) async throws -> Void) async throws {
        let cluster = try #require(PostgresClusterTrait.current)
        let database = try await cluster.createDatabase()
        let ports = try HAProxy.freePorts(4)
        try await withTemporaryDirectory { directory in
            var replicas: [ServerProcess] = []
            defer { for replica in replicas { replica.process.signal(SIGKILL) } }
            for index in 0..<3 {
                let place = directory.appendingPathComponent("replica-\(index + 1)")
                try FileManager.default.createDirectory(at: place, withIntermediateDirectories: true)
                // Rounds every 2 s: the partitions are shared out sooner.
                replicas.append(try await ServerProcess.start(
                    in: place,
                    http: """
                        max-connections-per-address = 2
                        proxy-protocol-from = ["127.0.0.1"]
                        """,
                    database: database,
                    configuration: """
                        [replication]
                        advertised-url = "http://127.0.0.1:\(ports[index + 1])"
                        lease-seconds = 6
                        """))
            }
            _ = try await PartitionOwnershipTests.status(database, within: 60, "three replicas holding 86, 85 and 85 partitions") {
                $0.replicas.count == 3 && $0.unowned == 0 && $0.replicas.map(\.partitions).sorted() == [85, 85, 86]
            }

            let haproxy = try await HAProxy.start(ports: ports, replicaPorts: replicas.map(\.port), in: directory.path)
            defer { haproxy.signal(SIGKILL) }
            do {
                try await body(Deployment(database: database, replicas: replicas, haproxy: haproxy, ports: ports))
            } catch {
                throw ChildProcessError(message: "\(error)\n--- haproxy output ---\n\(haproxy.output)")
            }
            // Checked every 2 s: no replica was taken out meanwhile.
            #expect(haproxy.lineCount(containing: " is DOWN") == 0, "\(haproxy.output)")
        }
    }

    /// A project's API key, created with the CLI as an operator does.
    static func createProject(_ database: String) async throws -> String {
        let created = try await run(["project", "create", "alpha", "--database", database, "--json"])
        #expect(created.status == 0, "\(created.errors)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: Any])
        return try #require(json["apiKey"] as? String)
    }

    /// A new device, registered through haproxy's shared port.
    static func register(apiKey: String, _ deployment: Deployment) async throws -> DeviceRegistration {
        let output = try await curl(["-X", "POST", "-H", "X-Api-Key: \(apiKey)", "\(deployment.sharedURL)/v1/devices"])
        return try JSONDecoder().decode(DeviceRegistration.self, from: Data(output.utf8))
    }

    /// The index of the replica serving `device`, found as a user finds it:
    /// asked at each replica's own port, the owner answers 200 and each of
    /// the others 307 to the same path and query at the owner's own port.
    static func owner(of device: DeviceRegistration, _ deployment: Deployment,
                      sourceLocation: SourceLocation = #_sourceLocation) async throws -> Int {
        let path = "/v1/devices/\(device.device)/publications?page=1"
        var answers: [String] = []
        for url in deployment.replicaURLs {
            answers.append(try await curl(["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
                                           "-H", "Authorization: Bearer \(device.secret)", url + path]))
        }
        let served = answers.indices.filter { answers[$0].hasPrefix("200") }
        try #require(served.count == 1, "\(answers)", sourceLocation: sourceLocation)
        let owner = served[0]
        for (index, answer) in answers.enumerated() where index != owner {
            #expect(answer == "307 \(deployment.replicaURLs[owner])\(path)", "replica \(index + 1): \(answer)",
                    sourceLocation: sourceLocation)
        }
        return owner
    }

    /// Each replica is listed at its own port at haproxy (its
    /// advertised-url). A device's request at the shared port reaches the
    /// replicas in turn: the two that do not serve the device answer 307 to
    /// the owner's own port at haproxy, and curl following the redirect
    /// (as nearbyd does) gets 200 from the owner through haproxy.
    @Test func aDeviceIsRedirectedToItsReplicasPortAtHAProxyAndServedThere() async throws {
        try await Self.withReplicasBehindHAProxy { deployment in
            let status = try await PartitionOwnershipTests.status(deployment.database)
            #expect(Set(status.replicas.map(\.url)) == Set(deployment.replicaURLs))

            let apiKey = try await Self.createProject(deployment.database)
            let device = try await Self.register(apiKey: apiKey, deployment)
            let owner = try await Self.owner(of: device, deployment)
            let home = deployment.replicaURLs[owner]
            let path = "/v1/devices/\(device.device)/publications?page=1"

            // Round robin over three healthy replicas: three requests in a
            // row reach each once.
            var answers: [String] = []
            for _ in 0..<3 {
                answers.append(try await Self.curl(["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
                                                    "-H", "Authorization: Bearer \(device.secret)", deployment.sharedURL + path]))
            }
            #expect(answers.sorted() == ["200 ", "307 \(home)\(path)", "307 \(home)\(path)"], "\(answers)")

            // --location-trusted: curl sends the credential on to another port.
            var followed: [String] = []
            for _ in 0..<3 {
                followed.append(try await Self.curl(["--location-trusted", "-o", "/dev/null",
                                                     "-w", "%{http_code} %{num_redirects} %{url_effective}",
                                                     "-H", "Authorization: Bearer \(device.secret)", deployment.sharedURL + path]))
            }
            #expect(followed.sorted() == ["200 0 \(deployment.sharedURL)\(path)", "200 1 \(home)\(path)", "200 1 \(home)\(path)"],
                    "\(followed)")
        }
    }

    /// The replica counts a connection through haproxy against the device's
    /// own address, from the PROXY header, not haproxy's: with `[http]
    /// max-connections-per-address = 2`, two streams held from 127.0.0.2
    /// through a replica's own port leave a third connection from 127.0.0.2
    /// refused (503 `too_many_connections`, naming the setting, the log
    /// naming 127.0.0.2), while 127.0.0.3 through the same haproxy port is
    /// served.
    @Test func eachConnectionCountsAgainstTheDevicesOwnAddress() async throws {
        try await Self.withReplicasBehindHAProxy { deployment in
            let apiKey = try await Self.createProject(deployment.database)
            // Two devices of one replica (a stream opens only at the owner):
            // among four devices of three replicas, two share one.
            var byOwner: [Int: [DeviceRegistration]] = [:]
            var pair: (owner: Int, devices: [DeviceRegistration])?
            for _ in 0..<4 where pair == nil {
                let device = try await Self.register(apiKey: apiKey, deployment)
                let owner = try await Self.owner(of: device, deployment)
                byOwner[owner, default: []].append(device)
                if let devices = byOwner[owner], devices.count == 2 { pair = (owner, devices) }
            }
            let (owner, devices) = try #require(pair)
            let port = deployment.ports[owner + 1]

            // Streams (WebSockets) are busy connections: the server closes
            // none of them to make room.
            var streams: [RawConnection] = []
            for device in devices {
                let (stream, answer) = try await HTTPConnectionTests.upgrade(port, TestDevice(registration: device), from: "127.0.0.2")
                #expect(answer.status == 101)
                streams.append(stream)
            }

            let refused = try await RawConnection.open(port: port, from: "127.0.0.2")
            let answer = try #require(RawResponse.all(in: try await refused.closedByServer(within: 10)).first)
            #expect(answer.status == 503)
            #expect(answer.error?.error == .tooManyConnections)
            let message = answer.error?.message ?? ""
            #expect(message.contains("[http] max-connections-per-address"), "\(message)")
            let logged = try await deployment.replicas[owner].process.waitForLine(containing: "connection refused")
            #expect(logged.contains("127.0.0.2"), "\(logged)")

            // Another device's address, through the same haproxy port.
            let other = try await Self.curl(["--interface", "127.0.0.3", "-o", "/dev/null", "-w", "%{http_code}",
                                             "http://127.0.0.1:\(port)/v1/health"])
            #expect(other == "200")
            #expect(streams.allSatisfy { $0.isOpen })
            for stream in streams { await stream.close() }
        }
    }
}
