import Foundation
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// A snapshot goes out a page at a time, the next page only once the writer
/// has taken the last: a stream holds one page of it, whatever its size.
@Suite(.timeLimit(.minutes(1)))
struct SnapshotPagingTests {
    /// "sub" hears "pub", which publishes `count` messages of 1000 bytes;
    /// pages of about 2500 bytes hold two of them (each counts 1000 + about 80).
    /// The stream opens afterwards, so nothing was pushed on it.
    static func matcher(publications count: Int, pageBytes: Int = 2500) async -> Matcher {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000, snapshotPageBytes: pageBytes)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        await matcher.putSubscription(MatcherTests.subscription)
        for index in 0..<count {
            await matcher.putPublication(MatcherTests.publication("pub", "p\(index)", contentBytes: 1000))
        }
        await matcher.applySightings(observer: "sub", seen: [MatcherTests.seen(MatcherTests.token(1))], gone: [], atMs: startMs)
        return matcher
    }

    /// Takes outputs up to and including the next snapshot page.
    static func nextPage(_ outputs: inout StreamOutputs.Iterator) async -> (matches: [Match], generation: UInt64?, before: [StreamEvent]) {
        var before: [StreamEvent] = []
        while let output = await outputs.next() {
            switch output {
            case .snapshotPage(.snapshot(let matches, more: true), let generation): return (matches, generation, before)
            case .event(.snapshot(let matches, more: false)): return (matches, nil, before)
            case .event(let event): before.append(event)
            default: Issue.record("unexpected \(output)")
            }
        }
        Issue.record("the stream ended")
        return ([], nil, before)
    }

    @Test func pagesGoOutOneAtATimeAndTogetherAreTheSnapshot() async throws {
        let matcher = await Self.matcher(publications: 5)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await matcher.sendSnapshot(device: "sub", streamID: stream.id)
        var sources: [String] = []
        var pages = 0
        var generation: UInt64?
        repeat {
            let page = await Self.nextPage(&outputs)
            #expect(page.before.isEmpty)
            #expect(page.matches.count <= 2)
            // Nothing more is queued until the writer asks.
            #expect(stream.outputs.backlog.waiting == 0)
            sources += page.matches.map(\.source)
            pages += 1
            generation = page.generation
            if let generation { await matcher.continueSnapshot(device: "sub", streamID: stream.id, generation: generation) }
        } while generation != nil
        #expect(pages == 3)
        #expect(sources == (0..<5).map { "pub/p\($0)" })
    }

    /// Between pages things change: what is lost is not listed later, what
    /// is found comes as found, in the stream's order.
    @Test func changesBetweenPagesGoOutAsEvents() async throws {
        let matcher = await Self.matcher(publications: 4)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await matcher.sendSnapshot(device: "sub", streamID: stream.id)
        let first = await Self.nextPage(&outputs)
        #expect(first.matches.map(\.source) == ["pub/p0", "pub/p1"])
        await matcher.removePublication(device: "pub", id: "p3")
        await matcher.putPublication(MatcherTests.publication("pub", "p4", contentBytes: 1000))
        // Another stream's ask is not this one's.
        await matcher.continueSnapshot(device: "sub", streamID: stream.id + 1, generation: try #require(first.generation))
        await matcher.continueSnapshot(device: "sub", streamID: stream.id, generation: try #require(first.generation))
        let second = await Self.nextPage(&outputs)
        #expect(second.before.count == 2)
        #expect(second.before.first == .lost(subscription: "s1", source: "pub/p3"))
        if case .found(let match)? = second.before.last { #expect(match.source == "pub/p4") } else { Issue.record("expected found") }
        // p3 is gone; p4 came as found, which the device counts with the pages.
        #expect(second.matches.map(\.source) == ["pub/p2"])
        #expect(second.generation == nil)
    }

    /// A new request starts the snapshot again; the writer's ask for the old
    /// one's next page is ignored, so one page at most is ever queued.
    @Test func aNewRequestStartsAgain() async throws {
        let matcher = await Self.matcher(publications: 6)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await matcher.sendSnapshot(device: "sub", streamID: stream.id)
        let old = try #require(await Self.nextPage(&outputs).generation)
        await matcher.sendSnapshot(device: "sub", streamID: stream.id)
        await matcher.continueSnapshot(device: "sub", streamID: stream.id, generation: old)
        let restarted = await Self.nextPage(&outputs)
        #expect(restarted.matches.map(\.source) == ["pub/p0", "pub/p1"])
        #expect(stream.outputs.backlog.waiting == 0)
    }

    /// One match larger than a page still goes out, alone on its page.
    @Test func aMatchLargerThanAPageHasAPageOfItsOwn() async throws {
        let matcher = await Self.matcher(publications: 2, pageBytes: 500)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()
        await matcher.sendSnapshot(device: "sub", streamID: stream.id)
        let first = await Self.nextPage(&outputs)
        #expect(first.matches.count == 1)
        await matcher.continueSnapshot(device: "sub", streamID: stream.id, generation: try #require(first.generation))
        let second = await Self.nextPage(&outputs)
        #expect(second.matches.count == 1)
        #expect(second.generation == nil)
    }

    /// A snapshot of one page is the plain snapshot nearbyd has always read,
    /// and a page with more to come says so.
    @Test func wireShape() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        #expect(String(decoding: try encoder.encode(StreamEvent.snapshot([])), as: UTF8.self) == #"{"event":"snapshot","matches":[]}"#)
        #expect(String(decoding: try encoder.encode(StreamEvent.snapshot([], more: true)), as: UTF8.self)
            == #"{"event":"snapshot","matches":[],"more":true}"#)
        #expect(try JSONDecoder().decode(StreamEvent.self, from: Data(#"{"event":"snapshot","matches":[]}"#.utf8)) == .snapshot([]))
        #expect(try JSONDecoder().decode(StreamEvent.self, from: Data(#"{"event":"snapshot","matches":[],"more":true}"#.utf8))
            == .snapshot([], more: true))
    }
}
