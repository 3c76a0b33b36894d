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
