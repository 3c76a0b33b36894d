import Foundation
import NearbyCore
@testable import NearbyServer
import Partitions
import ServerAPI
import Synchronization
import Testing

/// Matchers of replicas that divide the devices into partitions, without a
/// database: what one sends another goes through a mailbox the test empties
/// by hand, and time moves by hand.
@Suite(.timeLimit(.minutes(1))) struct PartitionedMatcherTests {
    /// What the matchers sent one another, in order.
    final class Mailbox: Sendable {
        private let letters = Mutex<[(to: String, letter: EdgeLetter)]>([])

        func post(from: String, to: String, _ message: EdgeMessage) {
            letters.withLock { $0.append((to, EdgeLetter(from: from, messages: [message]))) }
        }

        func take() -> [(to: String, letter: EdgeLetter)] {
            letters.withLock { letters in defer { letters = [] }; return letters }
        }
    }

    /// Three replicas A, B and C; the publisher's partition served by A, the
    /// subscriber's by B, C serving neither.
    struct Cluster {
        let clock = ManualWallClock(nowMs: startMs)
        let mailbox = Mailbox()
        let matchers: [String: Matcher]
        var owners: [String?] = Array(repeating: nil, count: Partition.count)
        let live: Set<String> = ["A", "B", "C"]

        init() async {
            var matchers: [String: Matcher] = [:]
            for id in ["A", "B", "C"] {
                let matcher = Matcher(clock: clock, replica: id, edgeTimeoutMs: 30_000)
                let mailbox = mailbox
                await matcher.routeEdges { mailbox.post(from: id, to: $0, $1) }
                matchers[id] = matcher
            }
            self.matchers = matchers
            owners[Partition.of(device: "pub")] = "A"
            owners[Partition.of(device: "sub")] = "B"
            await round()
            // Every replica holds every device and object, as the replicas' broadcast feed gives them.
            await broadcast(.deviceAdded(id: "pub", project: "alpha"))
            await broadcast(.deviceAdded(id: "sub", project: "alpha"))
            await broadcast(.objects(device: "pub", changes: [.putPublication(PartitionedMatcherTests.publication)]))
            await broadcast(.objects(device: "sub", changes: [.putSubscription(PartitionedMatcherTests.subscription)]))
        }

        subscript(_ id: String) -> Matcher { matchers[id]! }

        func broadcast(_ event: MatcherEvent) async {
            for id in matchers.keys.sorted() { await matchers[id]!.apply(event) }
        }

        /// A round of leases seen by every replica.
        func round(live: Set<String>? = nil) async {
            for id in matchers.keys.sorted() { await matchers[id]!.partitionsChanged(owners: owners, live: live ?? self.live) }
        }

        /// Hands over every letter posted, and those they lead to; returns how many.
        @discardableResult
        func deliver() async -> Int {
            var count = 0
            while true {
                let letters = mailbox.take()
                guard !letters.isEmpty else { return count }
                count += letters.count
                for (to, letter) in letters { await matchers[to]!.receive(letter) }
            }
        }

        /// "pub" hears "sub" on A, the replica serving it.
        func pubHearsSub(token: UInt8 = 1, atMs: UInt64? = nil) async {
            await self["A"].applySightings(observer: "pub", seen: [SeenEdge(observed: "sub", token: Self.token(token), medium: .ble,
                                                                            rssi: -50, distance: 1)],
                                           gone: [], atMs: atMs ?? clock.nowMs)
        }

        static func token(_ byte: UInt8) -> Token { Token(bytes: Array(repeating: byte, count: 8))! }
    }

    /// A publication that scans: found when its device hears a subscriber that broadcasts.
    static let publication = StoredPublication(device: "pub", id: "p1", namespace: "alpha", type: "t", content: Data("hello".utf8),
                                               mediums: [.ble], mode: .scan, expiresAtMs: startMs + 600_000)
    static let subscription = StoredSubscription(device: "sub", id: "s1", namespace: "alpha", type: "", mediums: [.ble],
                                                 mode: .broadcast, expiresAtMs: 0)

    @Test func theDevicesAreInDifferentPartitions() {
        #expect(Partition.of(device: "pub") != Partition.of(device: "sub"))
    }

    /// Copies lost on the way (the database away) are made good by the sync
    /// the home sends once sending fails: a lost put (the edge then only
    /// refreshed, which copies nothing) finds, a lost remove loses; a
    /// replica serving nothing, or not alive, is sent nothing.
    @Test func aResendRepairsCopiesLostOnTheWay() async throws {
        let cluster = await Cluster()
        let stream = try #require(await cluster["B"].openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await cluster.pubHearsSub()
        #expect(cluster.mailbox.take().count == 1, "the put, lost")
        cluster.clock.advance(byMs: 10_000)
        await cluster.pubHearsSub()
        #expect(await cluster.deliver() == 0, "a refresh sends nothing again")
        #expect(await cluster["B"].snapshot(of: "sub").isEmpty)

        await cluster["A"].resendEdges(to: "B")
        #expect(await cluster.deliver() == 1)
        guard case .event(.found(let match)) = await outputs.next() else { Issue.record("expected found on B"); return }
        #expect(match.source == "pub/p1")

        // The edge ends on A and its remove is lost: B still finds, until the next sync.
        await cluster["A"].applySightings(observer: "pub", seen: [], gone: [GoneEdge(observed: "sub", token: Cluster.token(1), medium: .ble)],
                                          atMs: cluster.clock.nowMs)
        #expect(cluster.mailbox.take().count == 1, "the remove, lost")
        #expect(await cluster["B"].snapshot(of: "sub").count == 1)
        await cluster["A"].resendEdges(to: "B")
        #expect(await cluster.deliver() == 1)
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost on B"); return }
        #expect(await cluster["B"].copyCount == 0)

        await cluster["A"].resendEdges(to: "C")
        await cluster["A"].resendEdges(to: "A")
        await cluster.round(live: ["A", "C"])
        await cluster["A"].resendEdges(to: "B")
        #expect(cluster.mailbox.take().isEmpty, "C serves no partition, A is the sender, B is not alive")
    }

    /// A replica listening again after a break sends every live replica
    /// what it should hold of its edges: a put lost while the database was
    /// away (and B's ask for it lost too) is made good, and B finds.
    @Test func aReplicaListeningAgainSendsTheOthersTheirEdges() async throws {
        let cluster = await Cluster()
        let stream = try #require(await cluster["B"].openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await cluster.pubHearsSub()
        #expect(cluster.mailbox.take().count == 1, "the put, lost")
        await cluster["A"].resendEdgesToEveryone()
        #expect(await cluster.deliver() == 1, "one sync, to B alone: C serves no partition")
        guard case .event(.found(let match)) = await outputs.next() else { Issue.record("expected found on B"); return }
        #expect(match.source == "pub/p1")
    }

    /// B finds the publisher's message through A, then C takes the
    /// publisher's partition without a hand-over (every replica's round
    /// sees it, A still alive): where the stale-home tests start. B's
    /// stream, its found read.
    static func foundOnBThenThePublisherTakenByC() async throws -> (Cluster, StreamOutputs.AsyncIterator) {
        var cluster = await Cluster()
        let stream = try #require(await cluster["B"].openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()
        await cluster.pubHearsSub()
        await cluster.deliver()
        var found = false
        if case .event(.found) = await outputs.next() { found = true }
        try #require(found, "expected found on B")
        cluster.owners[Partition.of(device: "pub")] = "C"
        await cluster.round()
        return (cluster, outputs)
    }

    /// The publisher's partition is taken by C without a hand-over (A's
    /// leases lapsed while the database was away, A still alive): A keeps
    /// its edge until it times out, but once C, now serving the publisher,
    /// makes the edge again from its next report, A's copy on B is stale and
    /// goes; taken again (A's sync came late), it goes when C says the edge
    /// ended, and B loses at once, not when A's edge would time out.
    @Test func anEdgeMadeByTheObserversNewReplicaSupersedesTheFormerOnes() async throws {
        var (cluster, outputs) = try await Self.foundOnBThenThePublisherTakenByC()
        let heard = SeenEdge(observed: "sub", token: Cluster.token(1), medium: .ble, rssi: -50, distance: 1)
        await cluster["C"].applySightings(observer: "pub", seen: [heard], gone: [], atMs: cluster.clock.nowMs)
        await cluster.deliver()
        #expect(await cluster["B"].copyCount == 1, "C's copy alone")
        await cluster["A"].resendEdges(to: "B")
        await cluster.deliver()
        #expect(await cluster["B"].copyCount == 2, "A's copy, stale, taken again")
        #expect(await cluster["B"].snapshot(of: "sub").count == 1)

        await cluster["C"].applySightings(observer: "pub", seen: [], gone: [GoneEdge(observed: "sub", token: Cluster.token(1), medium: .ble)],
                                          atMs: cluster.clock.nowMs)
        await cluster.deliver()
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost on B"); return }
        #expect(await cluster["B"].copyCount == 0)
    }

    /// As above, but the publisher's first report on C says it no longer
    /// hears the subscriber: C holds only A's copy (sent when C took the
    /// partition), drops it and tells B, which loses at once.
    @Test func anEndReportedToTheObserversNewReplicaEndsTheFormerOnesEdge() async throws {
        var (cluster, outputs) = try await Self.foundOnBThenThePublisherTakenByC()
        await cluster["A"].resendEdges(to: "C")
        await cluster.deliver()
        #expect(await cluster["C"].copyCount == 1, "A's edge, sent to the publisher's replica now")
        await cluster["C"].applySightings(observer: "pub", seen: [], gone: [GoneEdge(observed: "sub", token: Cluster.token(1), medium: .ble)],
                                          atMs: cluster.clock.nowMs)
        #expect(await cluster["C"].copyCount == 0)
        await cluster.deliver()
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost on B"); return }
        #expect(await cluster["B"].copyCount == 0)
    }

    @Test func anEdgeMadeOnOneReplicaFindsOnTheReplicaServingTheSubscriber() async throws {
        let cluster = await Cluster()
        let stream = try #require(await cluster["B"].openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await cluster.pubHearsSub()
        // One letter, to B alone: C serves neither device.
        #expect(await cluster.deliver() == 1)
        guard case .event(.found(let match)) = await outputs.next() else { Issue.record("expected found on B"); return }
        #expect(match.source == "pub/p1")
        #expect(await cluster["C"].copyCount == 0)
        #expect(await cluster["C"].snapshot(of: "sub").isEmpty)

        // A report that only refreshes the edge costs A alone.
        cluster.clock.advance(byMs: 10_000)
        await cluster.pubHearsSub()
        #expect(await cluster.deliver() == 0)

        // The edge times out on A, its home: B is told, and the subscriber loses.
        cluster.clock.advance(byMs: 30_000)
        await cluster["A"].sweep()
        #expect(await cluster.deliver() == 1)
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost on B"); return }
        #expect(await cluster["B"].copyCount == 0)
    }

    @Test func aReplicaThatTakesAPartitionIsSentItsEdgesAndTheOldOneLetsTheStreamGo() async throws {
        var cluster = await Cluster()
        let old = try #require(await cluster["B"].openStream(device: "sub"))
        await cluster.pubHearsSub()
        await cluster.deliver()
        #expect(await cluster["B"].snapshot(of: "sub").count == 1)

        // C takes the subscriber's partition and asks for its edges, before B's next round has seen it.
        cluster.owners[Partition.of(device: "sub")] = "C"
        await cluster["C"].partitionsChanged(owners: cluster.owners, live: cluster.live)
        await cluster.broadcast(.edgesWanted(replica: "C", partitions: [Partition.of(device: "sub")]))
        #expect(await cluster.deliver() >= 1)
        // The device reconnecting to C finds there what it had.
        #expect(await cluster["C"].snapshot(of: "sub").count == 1)

        // B's round sees C: the stream on B ends, without the device's sightings going, and B keeps no copies.
        await cluster.round()
        var outputs = old.outputs.makeAsyncIterator()
        var closed = false
        while let output = await outputs.next() {
            if case .close = output { closed = true }
        }
        #expect(closed)
        #expect(await cluster["B"].closeStream(device: "sub", id: old.id) == false)
        #expect(await cluster["B"].copyCount == 0)

        // What changes next goes to C.
        let stream = try #require(await cluster["C"].openStream(device: "sub"))
        var current = stream.outputs.makeAsyncIterator()
        cluster.clock.advance(byMs: 30_000)
        await cluster["A"].sweep()
        await cluster.deliver()
        guard case .event(.lost) = await current.next() else { Issue.record("expected lost on C"); return }
    }

    @Test func copiesFromAReplicaGoneAreKeptOneEdgeTimeoutThenDropped() async throws {
        let cluster = await Cluster()
        let stream = try #require(await cluster["B"].openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()
        await cluster.pubHearsSub()
        await cluster.deliver()
        guard case .event(.found) = await outputs.next() else { Issue.record("expected found"); return }

        // A round that does not see A: A's edges last as they would unrefreshed, an edge timeout (30 s).
        await cluster.round(live: ["B", "C"])
        cluster.clock.advance(byMs: 29_999)
        await cluster.round(live: ["B", "C"])
        // A round that could not survey says nothing of who is dead.
        await cluster["B"].partitionsChanged(owners: cluster.owners, live: nil)
        #expect(await cluster["B"].copyCount == 1)
        cluster.clock.advance(byMs: 1)
        await cluster.round(live: ["B", "C"])
        #expect(await cluster["B"].copyCount == 0)
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost"); return }
    }

    @Test func aReplicaSeenAgainIsNotTakenForDead() async throws {
        let cluster = await Cluster()
        await cluster.pubHearsSub()
        await cluster.deliver()
        // Begun just after B's survey: missed once, then seen.
        await cluster.round(live: ["B", "C"])
        cluster.clock.advance(byMs: 20_000)
        await cluster.round()
        cluster.clock.advance(byMs: 20_000)
        await cluster.round()
        #expect(await cluster["B"].copyCount == 1)
    }

    /// A replica stopping sends every edge it is home to to the others,
    /// which keep them whoever serves the devices: the replica that takes
    /// the subscriber's partition after A has gone has the match at once,
    /// until the edge would have timed out.
    @Test func aStoppingReplicasEdgesAreKeptByTheReplicasThatTakeItsDevices() async throws {
        var cluster = await Cluster()
        await cluster.pubHearsSub()
        await cluster.deliver()
        let (to, edges) = await cluster["A"].bequest()
        #expect(to == ["B", "C"])
        #expect(edges.map(\.key) == [Matcher.EdgeKey(observer: "pub", observed: "sub", medium: .ble)])
        for replica in to.sorted() { await cluster[replica].receive(EdgeLetter(from: "A", messages: [.bequest(edges)])) }
        // C serves neither device yet, and keeps it; A is gone from the next round.
        await cluster.round(live: ["B", "C"])
        #expect(await cluster["C"].copyCount == 1)
        cluster.owners[Partition.of(device: "sub")] = "C"
        cluster.owners[Partition.of(device: "pub")] = "C"
        await cluster.round(live: ["B", "C"])
        #expect(await cluster["C"].snapshot(of: "sub").count == 1)
        cluster.clock.advance(byMs: 30_000)
        await cluster.round(live: ["B", "C"])
        #expect(await cluster["C"].snapshot(of: "sub").isEmpty)
    }

    /// Once the device reports to the replica that took it, that replica's
    /// own edge stands for the gone replica's copy: the device no longer
    /// hearing its peer, the subscriber loses at once, not an edge timeout later.
    @Test func aNewHomesEdgeSupersedesAGoneHomesCopy() async throws {
        var cluster = await Cluster()
        await cluster.pubHearsSub()
        await cluster.deliver()
        // A is killed; B takes the publisher's partition (it already serves the subscriber's).
        cluster.owners[Partition.of(device: "pub")] = "B"
        await cluster.round(live: ["B", "C"])
        #expect(await cluster["B"].snapshot(of: "sub").count == 1)
        await cluster["B"].applySightings(observer: "pub", seen: [SeenEdge(observed: "sub", token: Cluster.token(1), medium: .ble,
                                                                           rssi: -50, distance: 1)],
                                          gone: [], atMs: cluster.clock.nowMs)
        #expect(await cluster["B"].copyCount == 0)
        await cluster["B"].applySightings(observer: "pub", seen: [], gone: [GoneEdge(observed: "sub", token: Cluster.token(1), medium: .ble)],
                                          atMs: cluster.clock.nowMs)
        #expect(await cluster["B"].snapshot(of: "sub").isEmpty)
    }

    /// The same when the device reported to its new replica before a round
    /// had seen the old one gone.
    @Test func aCopyOfAHomeFoundGoneAfterItsDeviceMovedIsSupersededThen() async throws {
        var cluster = await Cluster()
        await cluster.pubHearsSub()
        await cluster.deliver()
        await cluster["B"].applySightings(observer: "pub", seen: [SeenEdge(observed: "sub", token: Cluster.token(1), medium: .ble,
                                                                           rssi: -50, distance: 1)],
                                          gone: [], atMs: cluster.clock.nowMs)
        #expect(await cluster["B"].copyCount == 1)
        cluster.owners[Partition.of(device: "pub")] = "B"
        await cluster.round(live: ["B", "C"])
        #expect(await cluster["B"].copyCount == 0)
        #expect(await cluster["B"].snapshot(of: "sub").count == 1)
    }

    @Test func copiesOfDevicesServedElsewhereAreNotKept() async throws {
        let cluster = await Cluster()
        let copy = EdgeCopy(observer: "pub", observed: "sub", medium: .ble, rssi: -40, distance: 1)
        await cluster["C"].receive(EdgeLetter(from: "A", messages: [.put([copy])]))
        #expect(await cluster["C"].copyCount == 0)
        // Unless it holds the stream of one of them still.
        _ = try #require(await cluster["C"].openStream(device: "sub"))
        await cluster["C"].receive(EdgeLetter(from: "A", messages: [.put([copy])]))
        #expect(await cluster["C"].copyCount == 1)
    }

    @Test func aSyncReplacesWhatItsSenderHadSent() async throws {
        let cluster = await Cluster()
        let partition = Partition.of(device: "sub")
        let copy = EdgeCopy(observer: "pub", observed: "sub", medium: .ble, rssi: -40, distance: 1)
        await cluster["B"].receive(EdgeLetter(from: "A", messages: [.put([copy])]))
        await cluster["B"].receive(EdgeLetter(from: "C", messages: [.put([copy])]))
        #expect(await cluster["B"].copyCount == 2)
        // A says it has no edge there any more; C's copy stands.
        await cluster["B"].receive(EdgeLetter(from: "A", messages: [.sync(partitions: [partition], edges: [])]))
        #expect(await cluster["B"].copyCount == 1)
        #expect(await cluster["B"].snapshot(of: "sub").count == 1)
        await cluster["B"].receive(EdgeLetter(from: "C", messages: [.remove([copy.key])]))
        #expect(await cluster["B"].snapshot(of: "sub").isEmpty)
    }

    /// What one replica sends another fits in notifications, however many
    /// edges: a long sync goes as a sync of its first edges and puts of the
    /// rest, with the same effect.
    @Test func longMessagesGoInLettersThatEachFitANotification() async throws {
        let cluster = await Cluster()
        let partition = Partition.of(device: "sub")
        let copies = (0..<500).map { EdgeCopy(observer: "observer-\($0)", observed: "sub", medium: .ble, rssi: -60, distance: 2) }
        // B held a copy from A that the sync no longer has.
        await cluster["B"].receive(EdgeLetter(from: "A", messages: [.put([EdgeCopy(observer: "gone", observed: "sub", medium: .ble,
                                                                                    rssi: -60, distance: 2)])]))
        let messages: [EdgeMessage] = [.sync(partitions: [partition], edges: copies), .remove(copies.prefix(300).map(\.key))]
        let letters = try EdgeExchange.letters(from: "A", messages)
        #expect(letters.count > 2)
        for text in letters {
            #expect(text.utf8.count <= PostgresReplicaBus.inlineBytes)
            await cluster["B"].receive(try JSONDecoder().decode(EdgeLetter.self, from: Data(text.utf8)))
        }
        #expect(await cluster["B"].copyCount == 200)
    }

    @Test func aRepliedSyncHoldsTheSendersEdgesOfThosePartitionsOnly() async throws {
        var cluster = await Cluster()
        await cluster.pubHearsSub()
        await cluster.deliver()
        // C takes a partition neither device is in: A's answer holds nothing.
        let other = (0..<Partition.count).first { $0 != Partition.of(device: "pub") && $0 != Partition.of(device: "sub") }!
        cluster.owners[other] = "C"
        await cluster.round()
        await cluster.broadcast(.edgesWanted(replica: "C", partitions: [other]))
        #expect(await cluster.deliver() == 2)  // from A and from B, each empty
        #expect(await cluster["C"].copyCount == 0)
    }
}
