import Foundation
import Hummingbird
import HummingbirdTesting
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// `POST /v1/devices/{device}/changes`.
@Suite struct ChangeBatchTests {
    func publication(_ harness: Harness, type: String = "greeting", content: String = "hello",
                     mediums: [Medium] = [.ble]) -> PublicationSpec {
        PublicationSpec(namespace: "", type: type, content: Data(content.utf8), mediums: mediums, mode: .broadcast,
                        expiresAtMs: harness.clock.nowMs + 300_000)
    }

    let subscription = SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan, expiresAtMs: 0)

    @Test func appliedInOrderWithOneResultEach() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            try await harness.publish(device, "old")
            let results = try await harness.applyChanges(device, [
                .putPublication(id: "p1", publication(harness, type: "first")),
                .putSubscription(id: "s1", subscription),
                // Refused, and the later changes still apply.
                .putPublication(id: "bad", publication(harness, mediums: [])),
                .deletePublication(id: "old"),
                // Unknown ids: not an error in a batch.
                .deletePublication(id: "never"),
                .deleteSubscription(id: "never"),
                .putSubscription(id: "s2", subscription),
                .deleteSubscription(id: "s1"),
                // Later changes see earlier ones: this replaces p1.
                .putPublication(id: "p1", publication(harness, type: "second")),
                .deleteSubscription(id: "bad id"),
            ])
            #expect(results.results.map(\.id) == ["p1", "s1", "bad", "old", "never", "never", "s2", "s1", "p1", "bad id"])
            #expect(results.results.map { $0.error?.error } == [nil, nil, .invalidArgument, nil, nil, nil, nil, nil, nil, .invalidArgument])
            #expect(results.results[2].error?.message.contains("mediums") == true)
            #expect(results.results[9].error?.message.contains("subscription id") == true)

            let publications = try decode(PublicationList.self,
                                          try await harness.request(.get, APIPath.publications(device.id), headers: device.auth))
            #expect(publications.publications.map(\.id) == ["p1"])
            #expect(publications.publications.map(\.type) == ["second"])
            let subscriptions = try decode(SubscriptionList.self,
                                           try await harness.request(.get, APIPath.subscriptions(device.id), headers: device.auth))
            #expect(subscriptions.subscriptions.map(\.id) == ["s2"])
        }
    }

    @Test func anAppliedChangeHasNoErrorField() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let response = try await harness.request(.post, APIPath.changes(device.id), as: device,
                                                     json: ChangeBatch(changes: [.deletePublication(id: "p1")]))
            #expect(response.status == .ok)
            #expect(String(buffer: response.body) == #"{"results":[{"id":"p1"}]}"#)
        }
    }

    @Test func limitsPerDeviceCountWithinTheBatch() async throws {
        try await withServer(configure: { $0.limits.maxPublicationsPerDevice = 2 }) { harness in
            let device = try await harness.devices(1)[0]
            let results = try await harness.applyChanges(device, [
                .putPublication(id: "a", publication(harness)),
                .putPublication(id: "b", publication(harness)),
                .putPublication(id: "c", publication(harness)),
                // Replacing is always allowed.
                .putPublication(id: "b", publication(harness, content: "again")),
                .deletePublication(id: "a"),
                .putPublication(id: "c", publication(harness)),
            ])
            #expect(results.results.map { $0.error?.error } == [nil, nil, .limitExceeded, nil, nil, nil])
            #expect(results.results[2].error?.message.contains("max-publications-per-device") == true)
            let publications = try decode(PublicationList.self,
                                          try await harness.request(.get, APIPath.publications(device.id), headers: device.auth))
            #expect(publications.publications.map(\.id) == ["b", "c"])
        }
    }

    @Test func tooManyChangesAreRefusedAsAWhole() async throws {
        try await withServer(configure: { $0.limits.maxChangesPerBatch = 2 }) { harness in
            let device = try await harness.devices(1)[0]
            let changes = (1...3).map { ChangeBatch.Change.putSubscription(id: "s\($0)", subscription) }
            expectError(try await harness.request(.post, APIPath.changes(device.id), as: device, json: ChangeBatch(changes: changes)),
                        .contentTooLarge, .payloadTooLarge, mentioning: "max-changes-per-batch")
            #expect(try await harness.service.storage.subscriptions(device: device.id).isEmpty)
            #expect(try await harness.applyChanges(device, Array(changes.prefix(2))).results.allSatisfy { $0.error == nil })
        }
    }

    @Test func needsTheDevicesOwnSecret() async throws {
        try await withServer { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            let batch = ChangeBatch(changes: [.putSubscription(id: "s1", subscription)])
            expectError(try await harness.request(.post, APIPath.changes(a.id), as: b, json: batch), .forbidden, .permissionDenied)
            expectError(try await harness.request(.post, APIPath.changes(a.id), body: try JSONEncoder().encode(batch)),
                        .unauthorized, .unauthenticated)
            #expect(try await harness.service.storage.subscriptions(device: nil).isEmpty)
        }
    }

    /// A body that is no ChangeBatch at all is refused as a whole, naming the field.
    @Test(arguments: [
        (#"{"changes":[{"op":"delete-publication","id":"a"},{"op":"shout","id":"b"}]}"#, "changes[1].op"),
        (#"{"changes":[{"op":"put-subscription","id":"a"}]}"#, "changes[0].subscription"),
        (#"{"changes":[{"op":"delete-publication"}]}"#, "changes[0].id"),
        (#"{}"#, "changes"),
    ])
    func malformedBatches(body: String, mentioning: String) async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            expectError(try await harness.request(.post, APIPath.changes(device.id), headers: device.auth, body: Data(body.utf8)),
                        .badRequest, .invalidArgument, mentioning: mentioning)
        }
    }

    @Test func foundAndLostAsForSingleRequests() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            try await stream.expectNothingPushed()

            _ = try await harness.applyChanges(publisher, [
                .putPublication(id: "p1", publication(harness, content: "one")),
                .putPublication(id: "p2", publication(harness, type: "other")),
            ])
            var found = [try await stream.next(), try await stream.next()]
            found.sort { "\($0)" < "\($1)" }
            guard case .found(let first) = found[0], case .found(let second) = found[1] else {
                Issue.record("expected two found, got \(found)")
                return
            }
            #expect([first.source, second.source].sorted() == ["\(publisher.id)/p1", "\(publisher.id)/p2"])

            // Replaced with other content, then deleted: each change pushes what its own request would.
            _ = try await harness.applyChanges(publisher, [
                .putPublication(id: "p1", publication(harness, content: "two")),
                .deletePublication(id: "p2"),
            ])
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            guard case .found(let replaced) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(replaced.content == Data("two".utf8))
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p2"))
            try await stream.expectNothingPushed()
            try await stream.close()
        }
    }
}
