import Beacons
import DaemonCore
import DBus
import Foundation
import Logging
import NearbyCore
import ServerAPI
import Testing
import TestSupport
@testable import NearbyDaemon

/// `[server] url` with several replicas of nearby-server on one database,
/// each a real `nearby-server` process: two devices on two replicas of one
/// PostgreSQL database find each other, and when one replica is killed its
/// device's link and direct channel move to the other and go on working; a
/// dead first URL costs one quick retry, not a backoff delay; when every URL
/// fails, the reason names each. Behind the shipped haproxy configuration,
/// devices given only its shared port are served by their replicas through
/// it and find each other. An application server (slixmpp) on one
/// replica and a device's direct channel on the other exchange messages, and
/// CCS's guarantees hold across a kill of the application server's replica.
@BusActor
@Suite(.timeLimit(.minutes(2))) struct ServerReplicaTests {
    /// One nearby-server process on the shared database.
    struct Replica {
        let process: ChildProcess
        let url: String
        /// The XMPP endpoint's port, when the configuration has one.
        let xmppPort: Int?

        /// On `database`: a PostgreSQL URL, or by default an SQLite file in `directory`.
        static func start(_ name: String, in directory: TemporaryDirectory, database: String? = nil,
                          configuration: String = "") async throws -> Replica {
            let xmpp = configuration.contains("[xmpp]")
            let process = try await ChildProcess(name: name, executable: Programs.path("nearby-server"), arguments: [
                "serve", "--listen", "127.0.0.1:0", "--database", database ?? directory.file("server.sqlite"),
                "--config", try directory.write("\(name).conf", configuration), "--log-level", "debug",
            ] + (xmpp ? ["--xmpp-listen", "127.0.0.1:0"] : []))
            let line = try await process.waitForLine(containing: "nearby-server: listening on ")
            let url = line[line.range(of: "listening on ")!.upperBound...].trimmingCharacters(in: .whitespaces)
            var xmppPort: Int?
            if xmpp {
                let line = try await process.waitForLine(containing: "nearby-server: xmpp on ")
                xmppPort = Int(line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "")
            }
            return Replica(process: process, url: url, xmppPort: xmppPort)
        }
    }

    /// One device's link, and what it reported.
    struct Device {
        let link: ServerLink
        let events: Inbox<LinkEvent>
        let task: Task<Void, Never>

        func stop() async {
            task.cancel()
            await task.value
        }
    }

    let directory: TemporaryDirectory
    let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
    let registry = Registry(limits: RegistryLimits(), idPrefix: "replicas")
    /// Far above what a test waits: a retry that came only after it would time the test out.
    let slowBackoff = Backoff(initial: .seconds(30), maximum: .seconds(60))

    init() throws {
        directory = try TemporaryDirectory("nearbyd-replicas")
    }

    func createProject(_ name: String, database: String? = nil) async throws -> String {
        try await createProjectKeys(name, database: database).apiKey
    }

    /// The project's API key and server key (its application servers' password).
    func createProjectKeys(_ name: String, database: String? = nil) async throws -> (apiKey: String, serverKey: String) {
        let created = try await runProgram(Programs.path("nearby-server"),
                                           ["project", "create", name, "--database", database ?? directory.file("server.sqlite"), "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: Any]
        return (try #require(object?["apiKey"] as? String, "\(created.output)"),
                try #require(object?["serverKey"] as? String, "\(created.output)"))
    }

    func endpoints(_ urls: [String]) -> ServerEndpoints {
        ServerEndpoints(clients: urls.map { ServerClient(baseURL: $0, timeoutSeconds: 5) }, logger: logger)
    }

    /// The registrations are kept in the test's directory, so a link made
    /// again for an account is the same device.
    func credentials(_ endpoints: ServerEndpoints) -> CredentialStore {
        CredentialStore(stateDirectory: directory.path, endpoints: endpoints,
                        limits: CredentialStore.Limits(perUser: 4, total: 8, retention: .seconds(86_400)),
                        refusedKeyRetry: .seconds(600), clock: SystemWallClock(), logger: logger)
    }

    func device(_ account: Account, _ endpoints: ServerEndpoints, _ credentials: CredentialStore,
                backoff: Backoff = Backoff(initial: .milliseconds(50), maximum: .milliseconds(500))) -> Device {
        let link = ServerLink(account: account, endpoints: endpoints, credentials: credentials, backoff: backoff,
                              batchDelay: .zero, refusedRetry: .seconds(30), clock: SystemWallClock(), logger: logger)
        let events = Inbox<LinkEvent>()
        link.onEvent = { events.put($0) }
        return Device(link: link, events: events, task: Task { await link.run() })
    }

    func manager(uid: UInt32, apiKey: String) throws -> Manager {
        try registry.addManager(to: registry.addClient(busName: ":1.\(uid)", uid: uid), apiKey: apiKey, appId: "test", debugLogging: false)
    }

    func publication(_ text: String, of manager: Manager) throws -> Publication {
        try registry.addPublication(to: manager, message: Message(namespace: "", type: "greeting", content: Array(text.utf8)),
                                    strategy: Strategy(mediums: [.ble]), expiresAtMs: Self.nowMilliseconds + 3_600_000)
    }

    /// Two apps of the project (uids 1001 and 1002): the first publishes
    /// "hello" (a greeting), the second subscribes to greetings, both on BLE.
    func helloAndItsSubscriber(apiKey: String) throws -> (publisher: Manager, subscriber: Manager, hello: Publication,
                                                          subscription: Subscription) {
        let publisher = try manager(uid: 1001, apiKey: apiKey)
        let subscriber = try manager(uid: 1002, apiKey: apiKey)
        let hello = try publication("hello", of: publisher)
        let subscription = try registry.addSubscription(to: subscriber, filter: MessageFilter(type: "greeting"),
                                                        strategy: Strategy(mediums: [.ble]), expiresAtMs: 0)
        return (publisher, subscriber, hello, subscription)
    }

    /// The replicas' partitions, with their leases renewed every second:
    /// a killed replica's are taken over within 4 s.
    static let quickLeases = "[replication]\nlease-seconds = 3\n"

    /// Waits until each of two replicas of `database` owns half of the
    /// partitions: until then a device's partition may move from one to
    /// the other while a test uses it, and close its channel and link.
    static func waitForHalfThePartitionsEach(_ database: String) async throws {
        try await withTimeout(30, "two replicas holding 128 partitions each") {
            while try await partitions(database) != [128, 128] { try await Task.sleep(for: .milliseconds(200)) }
        }
    }

    /// How many partitions each live replica of `database` owns, as
    /// `nearby-server replicas --json` lists them.
    static func partitions(_ database: String) async throws -> [Int] {
        struct Status: Decodable {
            struct Replica: Decodable { var partitions: Int }
            var replicas: [Replica]
        }
        let listed = try await runProgram(Programs.path("nearby-server"), ["replicas", "--database", database, "--json"])
        return try JSONDecoder().decode(Status.self, from: Data(listed.output.utf8)).replicas.map(\.partitions)
    }

    /// The replica that serves `device`, asked with curl: the others
    /// redirect its requests there (307), the owner asks for its secret (401).
    static func home(of device: String, among urls: [String]) async throws -> String? {
        for url in urls {
            let answer = try await runProgram("/usr/bin/curl", ["-s", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
                                                                "\(url)/v1/devices/\(device)/publications"])
            if answer.output == "401" { return url }
        }
        return nil
    }

    /// A publishes, B finds it, each served by the replica that owns its
    /// partition whichever URL it was given first (the other redirects it).
    /// A's replica is killed (SIGKILL): once its leases run out A's link and
    /// direct channel move to the other, B loses nothing if it was there,
    /// and what A publishes there B finds.
    @Test func devicesOnTwoReplicasFindEachOtherAndSurviveAKill() async throws {
        defer { directory.remove() }
        let cluster = try await PostgresCluster.start()
        var replicas: [Replica] = []
        do {
            let database = try await cluster.createDatabase()
            let apiKey = try await createProject("replicas", database: database)
            for number in 1...2 {
                replicas.append(try await Replica.start("nearby-server-\(number)", in: directory, database: database,
                                                        configuration: Self.quickLeases))
            }
            let urls = replicas.map(\.url)
            // Both replicas hold their share before the devices come.
            try await Self.waitForHalfThePartitionsEach(database)
            let (publisher, subscriber, hello, subscription) = try helloAndItsSubscriber(apiKey: apiKey)
            let (helloID, subscriptionID) = (hello.id, subscription.id)

            // Two daemons, each with both URLs, each starting on another replica.
            let onFirst = endpoints(urls)
            let onSecond = endpoints(urls.reversed())
            let aCredentials = credentials(onFirst)
            let a = device(publisher.account, onFirst, aCredentials)
            let b = device(subscriber.account, onSecond, credentials(onSecond))
            let channel = DirectChannel(account: publisher.account,
                                        connect: DirectChannel.connector(account: publisher.account, credentials: aCredentials,
                                                                         endpoints: onFirst, logger: logger),
                                        endpoints: onFirst, backoff: Backoff(initial: .milliseconds(50), maximum: .milliseconds(500)),
                                        logger: logger)
            let channelOpen = Inbox<Bool>()
            channel.onOpenChanged = { channelOpen.put($0) }
            channel.wanted = true
            a.link.send(.publish(hello))
            b.link.send(.subscribe(subscription))
            let aHome = try #require(try await a.events.first(within: 20, "A connected") { $0.server != nil }.server)
            let bHome = try #require(try await b.events.first(within: 20, "B connected") { $0.server != nil }.server)
            let aDevice = try await aCredentials.registration(publisher.account, with: onFirst.current.client).device
            #expect(try await Self.home(of: aDevice, among: urls) == aHome)
            _ = try await a.events.first(within: 20, "the first replica holds the publication") { $0.registers(helloID) }
            _ = try await channelOpen.first(within: 20, "the channel open") { $0 }
            let token = try await a.events.first(within: 20, "A's token") { $0.issuedToken != nil }.issuedToken!
            b.link.send(.seen([Sighting(token: token, medium: .ble, rssi: -50, txPower: -59, seenAtMilliseconds: Self.nowMilliseconds)]))
            _ = try await b.events.first(within: 20, "B finds hello through the other replica") { $0.delivers("hello", to: subscriptionID) }

            a.events.clear()
            b.events.clear()
            let victim = try #require(urls.firstIndex(of: aHome))
            let survivor = urls[1 - victim]
            replicas[victim].process.signal(SIGKILL)
            _ = try await a.events.first(within: 30, "A moved to the replica left") { $0.isConnected(to: survivor) }
            _ = try await channelOpen.nth(2, within: 30, "the channel open again") { $0 }

            // A publication made now reaches the second replica, and its stream tells B.
            let again = try publication("again", of: publisher)
            let againID = again.id
            a.link.send(.publish(again))
            _ = try await a.events.first(within: 20, "the second replica holds the new publication") { $0.registers(againID) }
            _ = try await b.events.first(within: 20, "B finds it") { $0.delivers("again", to: subscriptionID) }
            if bHome == survivor {
                // B was on the replica that lived: it lost nothing.
                #expect(!b.events.values.contains { if case .stream(.lost) = $0 { true } else { false } })
            }

            channel.wanted = false
            await a.stop()
            await b.stop()
        } catch {
            for replica in replicas { await replica.process.stop() }
            await cluster.stop()
            throw error
        }
        for replica in replicas { await replica.process.stop() }
        await cluster.stop()
    }

    /// The shipped haproxy configuration (dist/haproxy/nearby-server.cfg)
    /// in front of three replicas, and two devices given only haproxy's
    /// shared port as `[server] url`: each is redirected to its replica's
    /// own port at haproxy (its advertised-url) and served there, through
    /// haproxy alone (the replicas take connections from 127.0.0.1 only with
    /// haproxy's PROXY header), and B finds what A publishes once it hears A.
    @Test(.enabled(if: HAProxy.isInstalled, "needs haproxy (/usr/sbin/haproxy): `make setup` installs it"))
    func devicesBehindHAProxyAreServedByTheirReplicasAndFindEachOther() async throws {
        defer { directory.remove() }
        let cluster = try await PostgresCluster.start()
        var replicas: [Replica] = []
        var haproxy: ChildProcess?
        var devices: [Device] = []
        func stopAll() async {
            for device in devices { await device.stop() }
            haproxy?.signal(SIGKILL)
            for replica in replicas { await replica.process.stop() }
            await cluster.stop()
        }
        do {
            let database = try await cluster.createDatabase()
            let apiKey = try await createProject("replicas", database: database)
            let ports = try HAProxy.freePorts(4)
            for number in 1...3 {
                replicas.append(try await Replica.start("nearby-server-\(number)", in: directory, database: database, configuration: """
                    [http]
                    proxy-protocol-from = ["127.0.0.1"]
                    [replication]
                    advertised-url = "http://127.0.0.1:\(ports[number])"
                    lease-seconds = 3
                    """))
            }
            try await withTimeout(60, "three replicas holding 86, 85 and 85 partitions") {
                while try await Self.partitions(database).sorted() != [85, 85, 86] { try await Task.sleep(for: .milliseconds(200)) }
            }
            let replicaPorts = try replicas.map { try #require(Int($0.url.split(separator: ":").last ?? "")) }
            haproxy = try await HAProxy.start(ports: ports, replicaPorts: replicaPorts, in: directory.path)
            let shared = "http://127.0.0.1:\(ports[0])"
            let own = Set(ports.dropFirst().map { "http://127.0.0.1:\($0)" })

            let (publisher, subscriber, hello, subscription) = try helloAndItsSubscriber(apiKey: apiKey)
            let (helloID, subscriptionID) = (hello.id, subscription.id)
            let aEndpoints = endpoints([shared])
            let aCredentials = credentials(aEndpoints)
            let a = device(publisher.account, aEndpoints, aCredentials)
            let b = device(subscriber.account, endpoints([shared]), credentials(endpoints([shared])))
            devices = [a, b]
            a.link.send(.publish(hello))
            b.link.send(.subscribe(subscription))
            // Each is served at its replica's own port, or at the shared one
            // when haproxy's turn happened to be its replica's.
            let aServer = try #require(try await a.events.first(within: 30, "A connected") { $0.server != nil }.server)
            let bServer = try #require(try await b.events.first(within: 30, "B connected") { $0.server != nil }.server)
            #expect(own.union([shared]).isSuperset(of: [aServer, bServer]), "A on \(aServer), B on \(bServer)")
            _ = try await a.events.first(within: 20, "A's replica holds the publication") { $0.registers(helloID) }
            let aDevice = try await aCredentials.registration(publisher.account, with: aEndpoints.current.client).device
            let aHome = try #require(try await Self.home(of: aDevice, among: own.sorted()), "no replica serves A")
            #expect(aServer == shared || aServer == aHome, "A on \(aServer), served by \(aHome)")
            let token = try await a.events.first(within: 20, "A's token") { $0.issuedToken != nil }.issuedToken!
            b.link.send(.seen([Sighting(token: token, medium: .ble, rssi: -50, txPower: -59, seenAtMilliseconds: Self.nowMilliseconds)]))
            _ = try await b.events.first(within: 20, "B finds hello") { $0.delivers("hello", to: subscriptionID) }
            // Checked every 2 s throughout: no replica was taken out.
            #expect(haproxy?.lineCount(containing: " is DOWN") == 0, "\(haproxy?.output ?? "")")
        } catch {
            await stopAll()
            throw error
        }
        await stopAll()
    }

    /// A publisher A served by one replica and a subscriber B served by the
    /// other, for `body`; A's publication scans, B's subscription
    /// broadcasts, so that a report of A's makes B find.
    struct CrossPair {
        var cluster: PostgresCluster
        var replicas: [Replica]
        var a: Device
        var b: Device
        var aHome: String
        var subscription: String
        var bToken: Token
    }

    func withCrossReplicaPair(_ body: (CrossPair) async throws -> Void) async throws {
        defer { directory.remove() }
        let cluster = try await PostgresCluster.start()
        var replicas: [Replica] = []
        var devices: [Device] = []
        do {
            let database = try await cluster.createDatabase()
            let apiKey = try await createProject("replicas", database: database)
            for number in 1...2 {
                replicas.append(try await Replica.start("nearby-server-\(number)", in: directory, database: database,
                                                        configuration: Self.quickLeases))
            }
            let urls = replicas.map(\.url)
            try await Self.waitForHalfThePartitionsEach(database)
            let publisher = try manager(uid: 1001, apiKey: apiKey)
            let hello = try registry.addPublication(to: publisher, message: Message(namespace: "", type: "greeting", content: Array("hello".utf8)),
                                                    strategy: Strategy(mediums: [.ble], mode: .scan),
                                                    expiresAtMs: Self.nowMilliseconds + 3_600_000)
            let a = device(publisher.account, endpoints(urls), credentials(endpoints(urls)))
            devices.append(a)
            a.link.send(.publish(hello))
            let aHome = try #require(try await a.events.first(within: 20, "A connected") { $0.server != nil }.server)

            // Subscribers until one is served by the other replica: each device's partition is its id's, which
            // the server draws at random (half of them on each replica; ten draws all alike: 1 in 512).
            var found: (device: Device, subscription: String, token: Token)?
            for uid in UInt32(1002)...1011 where found == nil {
                let subscriber = try manager(uid: uid, apiKey: apiKey)
                let subscription = try registry.addSubscription(to: subscriber, filter: MessageFilter(type: "greeting"),
                                                                strategy: Strategy(mediums: [.ble], mode: .broadcast), expiresAtMs: 0)
                let b = device(subscriber.account, endpoints(urls), credentials(endpoints(urls)))
                devices.append(b)
                b.link.send(.subscribe(subscription))
                let bHome = try #require(try await b.events.first(within: 20, "B connected") { $0.server != nil }.server)
                guard bHome != aHome else { continue }
                let token = try await b.events.first(within: 20, "B's token") { $0.issuedToken != nil }.issuedToken!
                found = (b, subscription.id, token)
            }
            let (b, subscriptionID, bToken) = try #require(found, "ten subscribers all served by A's replica")
            try await body(CrossPair(cluster: cluster, replicas: replicas, a: a, b: b, aHome: aHome, subscription: subscriptionID, bToken: bToken))
        } catch {
            for device in devices { await device.stop() }
            for replica in replicas { await replica.process.stop() }
            await cluster.stop()
            throw error
        }
        for device in devices { await device.stop() }
        for replica in replicas { await replica.process.stop() }
        await cluster.stop()
    }

    /// The replicas divide the devices: a report is applied by the replica
    /// serving its observer alone, and what it changes for a subscriber
    /// served by the other replica is sent there. A hears B, its replica
    /// makes the edge, and B finds A's message from its own replica; A no
    /// longer hearing B, B loses it.
    @Test func aSubscriberFindsWhatAPublisherServedByAnotherReplicaHears() async throws {
        try await withCrossReplicaPair { pair in
            pair.a.link.send(.seen([Sighting(token: pair.bToken, medium: .ble, rssi: -50, txPower: -59,
                                             seenAtMilliseconds: Self.nowMilliseconds)]))
            _ = try await pair.b.events.first(within: 20, "B finds hello from its own replica") {
                $0.delivers("hello", to: pair.subscription)
            }
            pair.a.link.send(.gone([Sighting.Key(token: pair.bToken, medium: .ble)]))
            _ = try await pair.b.events.first(within: 20, "B loses hello") {
                if case .stream(.lost(subscription: pair.subscription, source: _)) = $0 { true } else { false }
            }
        }
    }

    /// A's replica is stopped (SIGTERM) while B has found A's message through
    /// it: the replica exits 0 within 10 s, A moves to the other replica and
    /// reports there again, and B, which stayed, loses nothing meanwhile.
    @Test func aReplicaStoppedGracefullyHandsItsDevicesOverAndBLosesNothing() async throws {
        try await withCrossReplicaPair { pair in
            pair.a.link.send(.seen([Sighting(token: pair.bToken, medium: .ble, rssi: -50, txPower: -59,
                                             seenAtMilliseconds: Self.nowMilliseconds)]))
            _ = try await pair.b.events.first(within: 20, "B finds hello") { $0.delivers("hello", to: pair.subscription) }
            pair.a.events.clear()
            pair.b.events.clear()
            let victim = try #require(pair.replicas.first { $0.url == pair.aHome })
            let survivor = try #require(pair.replicas.first { $0.url != pair.aHome })
            victim.process.signal(SIGTERM)
            #expect(try await victim.process.waitForExit(within: 10) == 0)
            _ = try await pair.a.events.first(within: 30, "A moved to the replica left") { $0.isConnected(to: survivor.url) }
            // Connected means A has reported again there; its snapshot comes after.
            _ = try await pair.a.events.first(within: 20, "A's snapshot on the replica left") {
                if case .stream(.snapshot(_, more: false)) = $0 { true } else { false }
            }
            #expect(!pair.b.events.values.contains { if case .stream(.lost) = $0 { true } else { false } },
                    "\(pair.b.events.values)")
            // The edge is A's new replica's now: A no longer hearing B, B loses hello.
            pair.a.link.send(.gone([Sighting.Key(token: pair.bToken, medium: .ble)]))
            _ = try await pair.b.events.first(within: 20, "B loses hello") {
                if case .stream(.lost(subscription: pair.subscription, source: _)) = $0 { true } else { false }
            }
        }
    }

    /// PostgreSQL stopped under two replicas dividing the devices, A
    /// hearing B meanwhile, and started again: the replicas recover by
    /// themselves (leases, listeners, pools), and B finds A's message from
    /// its own replica, whichever replicas serve the two by then; A no
    /// longer hearing B, B loses it at once, though the replica that served
    /// A before may still hold the edge (a partition taken without a
    /// hand-over: `anEdgeMadeByTheObserversNewReplicaSupersedesTheFormerOnes`).
    @Test func replicasDividingTheDevicesRecoverFromARestartOfPostgreSQL() async throws {
        try await withCrossReplicaPair { pair in
            try await pair.cluster.stopServer()
            pair.a.link.send(.seen([Sighting(token: pair.bToken, medium: .ble, rssi: -50, txPower: -59,
                                             seenAtMilliseconds: Self.nowMilliseconds)]))
            try await pair.cluster.startServer()
            _ = try await pair.b.events.first(within: 40, "B finds hello after the restart") { $0.delivers("hello", to: pair.subscription) }
            pair.a.link.send(.gone([Sighting.Key(token: pair.bToken, medium: .ble)]))
            _ = try await pair.b.events.first(within: 20, "B loses hello") {
                if case .stream(.lost(subscription: pair.subscription, source: _)) = $0 { true } else { false }
            }
        }
    }

    /// The XMPP domain of the replicas' connection server.
    static let xmppDomain = "nearby.test"

    /// The slixmpp application server of the end-to-end tests, logged in to
    /// each of `ports` in turn as it reconnects.
    func appServer(ports: [Int], serverKey: String, flags: [String]) async throws -> ChildProcess {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let server = try await ChildProcess(
            name: "app-server", executable: root.appendingPathComponent(".build/venv/bin/python").path,
            arguments: [root.appendingPathComponent("Tests/EndToEndTests/python/ccs_appserver.py").path,
                        "--jid", "shop@\(Self.xmppDomain)", "--key", serverKey, "--ca", directory.file("xmpp.pem")]
                + ports.flatMap { ["--port", "\($0)"] } + flags,
            environment: ["PYTHONUNBUFFERED": "1"])
        try await server.waitForLine(containing: "ready")
        return server
    }

    /// The ids of the upstream messages an application server printed, once per delivery.
    static func delivered(_ server: ChildProcess) -> [String] {
        server.lines.values.compactMap { line -> String? in
            guard line.hasPrefix("gcm "),
                  let payload = try? JSONSerialization.jsonObject(with: Data(line.dropFirst(4).utf8)) as? [String: Any],
                  payload["message_type"] == nil else { return nil }
            return payload["message_id"] as? String
        }
    }

    /// The application server logs in to replica 1, the device's direct
    /// channel is on the replica that serves it (either): upstream, its ack,
    /// downstream and the delivery receipt reach the other side. Replica 1
    /// is killed (SIGKILL) with a message out unacked: the application
    /// server reconnects to replica 2, which gives the message again once
    /// the dead replica's claim lapses (and the channel, if it was there,
    /// reopens on replica 2); what was acked before is never delivered again.
    @Test func anApplicationServerAndADeviceOnTwoReplicasSurviveAKill() async throws {
        defer { directory.remove() }
        let cluster = try await PostgresCluster.start()
        var replicas: [Replica] = []
        var application: ChildProcess?
        do {
            let database = try await cluster.createDatabase()
            let keys = try await createProjectKeys("shop", database: database)
            let made = try await runProgram(Programs.path("nearby-server"), [
                "certificate", Self.xmppDomain, "--certificate", directory.file("xmpp.pem"), "--private-key", directory.file("xmpp.key"),
            ])
            #expect(made.status == 0, "\(made.output)")
            let configuration = """
                [xmpp]
                domain = "\(Self.xmppDomain)"
                certificate = "\(directory.file("xmpp.pem"))"
                private-key = "\(directory.file("xmpp.key"))"
                claim-lease-seconds = 3
                \(Self.quickLeases)
                """
            for number in 1...2 {
                replicas.append(try await Replica.start("nearby-server-\(number)", in: directory, database: database,
                                                        configuration: configuration))
            }
            // A partition moving while the channel is open would close it, and lose what it was sending.
            try await Self.waitForHalfThePartitionsEach(database)
            let ports = try replicas.map { try #require($0.xmppPort) }
            let device = try manager(uid: 1001, apiKey: keys.apiKey).account
            let onSecond = endpoints(replicas.map(\.url).reversed())
            let credentials = credentials(onSecond)
            let channel = DirectChannel(account: device,
                                        connect: DirectChannel.connector(account: device, credentials: credentials, endpoints: onSecond, logger: logger),
                                        endpoints: onSecond, backoff: Backoff(initial: .milliseconds(50), maximum: .milliseconds(500)),
                                        logger: logger)
            let opened = Inbox<Bool>()
            let events = Inbox<ChannelEvent>()
            channel.onOpenChanged = { opened.put($0) }
            channel.onEvent = { events.put($0) }
            channel.wanted = true
            _ = try await opened.first(within: 20, "the channel open (on the replica that serves the device)") { $0 }
            #expect(await onSecond.current.client.baseURL == replicas[1].url)
            let registration = try await credentials.registration(device, with: await onSecond.current.client).device

            // Messages whose id starts with "hold-" are not acked on the first connection. It sends d-1 at once.
            let downstream = #"{"to": "\#(registration)", "message_id": "d-1", "data": {"k": "v"}, "delivery_receipt_requested": true}"#
            let server = try await appServer(ports: ports, serverKey: keys.serverKey,
                                             flags: ["--hold-first", "hold-", "--send", downstream])
            application = server
            func upstream(_ id: String) -> ChannelRequest {
                .send(ChannelUpstream(app: "org.example.shop", messageId: id, to: "shop@\(Self.xmppDomain)", data: ["id": id],
                                      expiresAtMs: Self.nowMilliseconds + 600_000))
            }
            func sent(_ id: String) -> @Sendable (ChannelEvent) -> Bool {
                { $0 == .sent([ChannelMessageRef(app: "org.example.shop", messageId: id)]) }
            }
            // Downstream from replica 1 to the channel; the device's ack comes back as a receipt.
            _ = try await events.first(within: 20, "d-1 on the channel") { $0 == .message(ChannelDownstream(messageId: "d-1", from: "shop", data: ["k": "v"])) }
            channel.send(.ack(messageId: "d-1"))
            _ = try await server.waitForLine(containing: "acked dr2:d-1")
            channel.send(upstream("m-1"))
            _ = try await events.first(within: 20, "m-1 acked by the application server on the other replica", where: sent("m-1"))

            channel.send(upstream("hold-1"))
            _ = try await server.waitForLine(containing: #""message_id": "hold-1""#)

            // The channel is on the replica that serves the device, which may be the one killed.
            let channelHome = await onSecond.homeClient(for: registration)?.baseURL ?? replicas[1].url
            replicas[0].process.signal(SIGKILL)
            _ = try await server.waitForLine(containing: "disconnected")
            _ = try await server.waitForLine(containing: "ready", occurrence: 2, within: 20)
            if channelHome == replicas[0].url {
                // Once replica 2 has taken the device's partition the channel
                // opens there, and hold-1 goes again, as nearbyd's outbox sends
                // what waits: its verdict comes when it has one.
                _ = try await opened.nth(2, within: 30, "the channel open again on the replica left") { $0 }
                channel.send(upstream("hold-1"))
            }
            // Replica 1's claim on hold-1 lapses (3 s): replica 2 gives it to the new connection, which acks it.
            _ = try await events.first(within: 30, "hold-1 acked after the application server moved", where: sent("hold-1"))
            channel.send(upstream("m-2"))
            _ = try await events.first(within: 20, "m-2 acked", where: sent("m-2"))
            let delivered = Self.delivered(server)
            #expect(delivered.filter { $0 == "m-1" }.count == 1, "m-1, acked, is delivered once: \(delivered)")
            #expect(delivered.filter { $0 == "hold-1" }.count == 2, "hold-1 is delivered again after its connection ended: \(delivered)")
            #expect(delivered.filter { $0 == "m-2" }.count == 1, "\(delivered)")

            channel.wanted = false
        } catch {
            await application?.stop()
            for replica in replicas { await replica.process.stop() }
            await cluster.stop()
            throw error
        }
        await application?.stop()
        for replica in replicas { await replica.process.stop() }
        await cluster.stop()
    }

    /// A device given one replica's URL whose partition another replica
    /// owns is redirected there, and its link and direct channel connect to
    /// that replica, which is not in its list. Devices are registered until
    /// one's partition is the other replica's (half of them are: sixteen
    /// tries fail one run in 65,536).
    @Test func aDeviceFollowsTheRedirectToTheReplicaThatServesIt() async throws {
        defer { directory.remove() }
        let cluster = try await PostgresCluster.start()
        var replicas: [Replica] = []
        do {
            let database = try await cluster.createDatabase()
            let apiKey = try await createProject("homes", database: database)
            for number in 1...2 {
                replicas.append(try await Replica.start("nearby-server-\(number)", in: directory, database: database,
                                                        configuration: Self.quickLeases))
            }
            try await Self.waitForHalfThePartitionsEach(database)
            let (given, other) = (replicas[0].url, replicas[1].url)
            let only = endpoints([given])
            let credentials = credentials(only)
            var redirected: (Account, Device)?
            for uid in UInt32(2001)...2016 {
                let account = try manager(uid: uid, apiKey: apiKey).account
                let device = device(account, only, credentials)
                let home = try #require(try await device.events.first(within: 20, "device \(uid) connected") { $0.server != nil }.server)
                let id = try await credentials.registration(account, with: only.current.client).device
                #expect(try await Self.home(of: id, among: [given, other]) == home)
                if home == other {
                    redirected = (account, device)
                    break
                }
                await device.stop()
            }
            let (account, device) = try #require(redirected, "no device of sixteen was served by the other replica")
            let channel = DirectChannel(account: account,
                                        connect: DirectChannel.connector(account: account, credentials: credentials,
                                                                         endpoints: only, logger: logger),
                                        endpoints: only, backoff: Backoff(initial: .milliseconds(50), maximum: .milliseconds(500)),
                                        logger: logger)
            let channelOpen = Inbox<Bool>()
            channel.onOpenChanged = { channelOpen.put($0) }
            channel.wanted = true
            _ = try await channelOpen.first(within: 20, "the channel open at the device's replica") { $0 }
            #expect(await only.homeClient(for: try await credentials.registration(account, with: only.current.client).device)?.baseURL
                        == other)
            channel.wanted = false
            await device.stop()
        } catch {
            for replica in replicas { await replica.process.stop() }
            await cluster.stop()
            throw error
        }
        for replica in replicas { await replica.process.stop() }
        await cluster.stop()
    }

    /// Nothing listens on port 9 of 127.0.0.1 and 127.0.0.2 (both loopback):
    /// a connection there is refused at once.
    static let deadURLs = ["http://127.0.0.1:9", "http://127.0.0.2:9"]

    @Test func aDeadFirstURLCostsOneQuickRetryNotABackoffDelay() async throws {
        defer { directory.remove() }
        let apiKey = try await createProject("dead-first")
        let live = try await Replica.start("nearby-server", in: directory)
        do {
            let shared = endpoints([Self.deadURLs[0], live.url])
            let a = device(Account(uid: 1001, apiKey: apiKey), shared, credentials(shared), backoff: slowBackoff)
            // Well within the backoff's 30 s: what is checked is that no round ended waiting.
            _ = try await a.events.first(within: 25, "connected to the second URL") { $0.isConnected(to: live.url) }
            #expect(!a.events.values.contains { if case .waiting = $0 { true } else { false } })
            await a.stop()

            // A beacon lookup asks the current URL; asked with the dead one
            // first, it moves on within the same question.
            let fresh = endpoints([Self.deadURLs[0], live.url])
            let beacon = try AdvertisedID(type: .eddystone, bytes: Array(repeating: 7, count: 16))
            let attachments = try await fresh.attachments(apiKey: apiKey, namespacedType: "*", beacon: beacon, telemetry: nil,
                                                          observedAtMs: Self.nowMilliseconds)
            #expect(attachments.isEmpty)
            #expect(await fresh.current.client.baseURL == live.url)
        } catch {
            await live.process.stop()
            throw error
        }
        await live.process.stop()
    }

    @Test func whenEveryURLFailsTheReasonNamesEach() async throws {
        defer { directory.remove() }
        let shared = endpoints(Self.deadURLs)
        let a = device(Account(uid: 1001, apiKey: "key"), shared, credentials(shared), backoff: slowBackoff)
        let waiting = try await a.events.first(within: 30, "the round's reason") { if case .waiting = $0 { true } else { false } }
        guard case .waiting(let reason, let reached) = waiting else { return }
        #expect(!reached)
        #expect(reason.hasPrefix("cannot reach nearby-server: \(Self.deadURLs[0]): POST /v1/devices: "), "\(reason)")
        #expect(reason.contains("; \(Self.deadURLs[1]): POST /v1/devices: "), "\(reason)")
        await a.stop()
    }

    static var nowMilliseconds: UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }
}

extension LinkEvent {
    /// The server a connection was made to, for `.connected`.
    var server: String? {
        if case .connected(_, _, let server) = self { server } else { nil }
    }

    func isConnected(to server: String) -> Bool {
        if case .connected(_, _, server) = self { true } else { false }
    }

    func registers(_ id: String) -> Bool {
        if case .registered(id) = self { return true }
        if case .connected(_, let registered, _) = self { return registered.contains(id) }
        return false
    }

    /// The token the server issued, named apart from the case `token`, which
    /// a closure over `LinkEvent` could take for it.
    var issuedToken: Token? {
        if case .token(let token) = self { token } else { nil }
    }

    /// Found, or in a snapshot: the message `text` for `subscription`.
    func delivers(_ text: String, to subscription: String) -> Bool {
        let matches: [Match] = switch self {
        case .stream(.found(let match)): [match]
        case .stream(.snapshot(let matches, _)): matches
        default: []
        }
        return matches.contains { $0.subscription == subscription && $0.content == Data(text.utf8) }
    }
}
