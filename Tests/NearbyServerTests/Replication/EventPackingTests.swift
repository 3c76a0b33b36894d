import Foundation
import NearbyCore
@testable import NearbyServer
import Synchronization
import Testing

/// The matcher's events go to the other replicas packed: what a replica's
/// requests publish while one message is sent goes in the next, as few
/// messages as the bus carries cheaply, in order.
@Suite struct EventPackingTests {
    /// Records what is published; refuses messages holding `refusing`.
    final class RecordingBus: ReplicaBus {
        let packedBytes = 40
        let refusing: String?
        private let published = Mutex<[String]>([])
        var messages: [String] { published.withLock { $0 } }

        init(refusing: String? = nil) { self.refusing = refusing }

        func publish(_ message: String) async throws {
            if let refusing, message.contains(refusing) { throw ReplicationError(message: "refused") }
            published.withLock { $0.append(message) }
        }

        func listen(_ deliver: @escaping @Sendable (ReplicaDelivery) async throws -> Void) async {}
    }

    static func put(_ id: String, _ bytes: Int) -> ObjectChange {
        .putPublication(StoredPublication(device: "d1", id: id, namespace: "ns", type: "t", content: Data(count: bytes),
                                          mediums: [.ble], mode: .broadcast, expiresAtMs: 1))
    }

    /// An event too long for one message goes without its publications'
    /// contents, read back from storage as it is applied; one storage no
    /// longer holds is left out, and the other changes stay.
    @Test func contentsTooLongForAMessageAreReadFromStorage() async throws {
        let small = try ReplicatedMatcherFeed.Envelope.parts(of: .objects(device: "d1", changes: [Self.put("small", 10)]),
                                                             replica: "r", maximumBytes: 7900)
        #expect(small.count == 1 && small[0].contentInStorage == nil)
        let event = MatcherEvent.objects(device: "d1", changes: [Self.put("big", 10_000), Self.put("gone", 10_000),
                                                                  .deleteSubscription(id: "s")])
        let parts = try ReplicatedMatcherFeed.Envelope.parts(of: event, replica: "r", maximumBytes: 7900)
        #expect(parts.count == 1)
        let text = try parts[0].encoded
        #expect(text.utf8.count <= 7900)
        let envelope = try JSONDecoder().decode(ReplicatedMatcherFeed.Envelope.self, from: Data(text.utf8))
        #expect(envelope.contentInStorage == ["big", "gone"])
        let read = try await envelope.event { _, id in id == "big" ? Data(count: 10_000) : nil }
        #expect(read == .objects(device: "d1", changes: [Self.put("big", 10_000), .deleteSubscription(id: "s")]))
    }

    /// An event too long even so goes in parts that each fit, applied one
    /// after the other to the same effect: a batch's changes in order, a
    /// report's sightings seen before gone.
    @Test func anEventTooLongEvenSoGoesInPartsThatEachFit() async throws {
        let changes = (0..<256).map { Self.put("publication-\($0)", $0.isMultiple(of: 2) ? 200 : 0) }
        let parts = try ReplicatedMatcherFeed.Envelope.parts(of: .objects(device: "d1", changes: changes), replica: "r",
                                                             maximumBytes: 7900)
        #expect(parts.count > 1)
        for part in parts { #expect(try part.encoded.utf8.count <= 7900) }
        var applied: [ObjectChange] = []
        for part in parts {
            // Storage gives back each content left out: the even ones' 200 bytes.
            guard case .objects(_, let some) = try await part.event(readingContents: { _, id in
                Int(id.split(separator: "-")[1])!.isMultiple(of: 2) ? Data(count: 200) : Data()
            }) else { Issue.record("not objects"); return }
            applied += some
        }
        #expect(applied == changes)

        let seen = (0..<300).map { SeenEdge(observed: "device-\($0)", token: Token(bytes: Array(repeating: UInt8($0 % 256), count: Token.byteCount))!, medium: .ble,
                                            rssi: -50, distance: 1.5) }
        let gone = (0..<100).map { GoneEdge(observed: "device-\($0)", token: Token(bytes: Array(repeating: 1, count: Token.byteCount))!, medium: .audio) }
        let report = MatcherEvent.sightings(observer: "o", atMs: 7, seen: seen, gone: gone)
        let reportParts = try ReplicatedMatcherFeed.Envelope.parts(of: report, replica: "r", maximumBytes: 7900)
        #expect(reportParts.count > 1)
        var allSeen: [SeenEdge] = [], allGone: [GoneEdge] = []
        for part in reportParts {
            #expect(try part.encoded.utf8.count <= 7900)
            guard case .sightings("o", 7, let someSeen, let someGone) = part.event else { Issue.record("not the report"); return }
            // Nothing seen comes after something gone.
            #expect(someSeen.isEmpty || allGone.isEmpty)
            allSeen += someSeen
            allGone += someGone
        }
        #expect(allSeen == seen && allGone == gone)
    }

    @Test func envelopesArePackedInOrderIntoMessagesTheBusCarriesCheaply() async throws {
        let bus = RecordingBus()
        // 9 bytes each, 10 with its comma: three fit in 40 with the brackets.
        let envelopes = (1...7).map { #"{"n":"\#($0)"}"# } + [String(repeating: "x", count: 50), #"{"n":"9"}"#]
        let results = try await ReplicatedMatcherFeed.send(envelopes, on: bus)
        #expect(bus.messages == [
            #"[{"n":"1"},{"n":"2"},{"n":"3"}]"#, #"[{"n":"4"},{"n":"5"},{"n":"6"}]"#, #"[{"n":"7"}]"#,
            // Longer than the bus carries cheaply: alone.
            "[" + String(repeating: "x", count: 50) + "]", #"[{"n":"9"}]"#,
        ])
        #expect(results.count == envelopes.count)
        #expect(results.allSatisfy { if case .success = $0 { true } else { false } })
    }

    @Test func aMessageTheBusRefusesFailsItsOwnEnvelopesOnly() async throws {
        let bus = RecordingBus(refusing: "5")
        let envelopes = (1...7).map { #"{"n":"\#($0)"}"# }
        let results = try await ReplicatedMatcherFeed.send(envelopes, on: bus)
        #expect(bus.messages == [#"[{"n":"1"},{"n":"2"},{"n":"3"}]"#, #"[{"n":"7"}]"#])
        #expect(results.map { if case .success = $0 { true } else { false } } == [true, true, true, false, false, false, true])
    }
}
