import Foundation
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

    /// An event too long for one message goes without its publications'
    /// contents, read back from storage as it is applied; one storage no
    /// longer holds is left out, and the other changes stay.
    @Test func contentsTooLongForAMessageAreReadFromStorage() async throws {
        func put(_ id: String, _ bytes: Int) -> ObjectChange {
            .putPublication(StoredPublication(device: "d1", id: id, namespace: "ns", type: "t", content: Data(count: bytes),
                                              mediums: [.ble], mode: .broadcast, expiresAtMs: 1))
        }
        let event = MatcherEvent.objects(device: "d1", changes: [put("big", 10_000), put("gone", 10_000), .deleteSubscription(id: "s")])
        let short = try ReplicatedMatcherFeed.Envelope.encoded(replica: "r", sequence: 1, event: .objects(device: "d1", changes: [put("small", 10)]),
                                                               maximumBytes: 7900)
        #expect(!short.contains("contentInStorage"))
        let text = try ReplicatedMatcherFeed.Envelope.encoded(replica: "r", sequence: 2, event: event, maximumBytes: 7900)
        #expect(text.utf8.count <= 7900)
        let envelope = try JSONDecoder().decode(ReplicatedMatcherFeed.Envelope.self, from: Data(text.utf8))
        #expect(envelope.contentInStorage == ["big", "gone"])
        let read = try await envelope.event { device, id in id == "big" ? Data(count: 10_000) : nil }
        #expect(read == .objects(device: "d1", changes: [put("big", 10_000), .deleteSubscription(id: "s")]))
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
