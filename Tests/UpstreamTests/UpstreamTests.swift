import Foundation
import NearbyCore
import Testing
import Upstream

struct UpstreamMessageTests {
    static func message(data: [String: String] = ["greeting": "hello"], to: String = "shop@nearby.example",
                        id: String = "m1", ttl: Int64 = 60) -> UpstreamMessage {
        UpstreamMessage(data: data, to: to, messageID: id, ttlSeconds: ttl)
    }

    @Test func aWellFormedMessagePasses() throws {
        try Self.message().validate()
        try Self.message(data: [:], ttl: 0).validate()
        try Self.message(data: ["k": String(repeating: "v", count: 4095)], ttl: UpstreamMessage.maxTTLSeconds).validate()
    }

    @Test(arguments: [
        (message(data: ["k": String(repeating: "v", count: 4096)]), "data holds 4097 bytes"),
        (message(data: ["from": "me"]), "data key 'from' is reserved"),
        (message(data: ["message_type": "ack"]), "data key 'message_type' is reserved"),
        (message(data: ["google.x": "1"]), "data key 'google.x' is reserved"),
        (message(data: ["gcm_x": "1"]), "data key 'gcm_x' is reserved"),
        (message(data: ["": "1"]), "empty key"),
        (message(to: "shop"), "must be SENDER_ID@DOMAIN"),
        (message(to: "Shop@nearby.example"), "must be SENDER_ID@DOMAIN"),
        (message(to: "shop@nearby..example"), "must be SENDER_ID@DOMAIN"),
        (message(to: "shop@a@b"), "must be SENDER_ID@DOMAIN"),
        (message(id: ""), "message_id must be"),
        (message(id: "a\nb"), "message_id must be"),
        (message(id: String(repeating: "x", count: 257)), "message_id must be"),
        (message(ttl: -1), "ttl_seconds -1"),
        (message(ttl: UpstreamMessage.maxTTLSeconds + 1), "ttl_seconds 2419201"),
    ])
    func badMessagesAreNamed(message: UpstreamMessage, complaint: String) {
        #expect {
            try message.validate()
        } throws: { error in
            guard case .invalidArguments(let text) = error as? NearbyError else { return false }
            return text.contains(complaint)
        }
    }
}

struct OutboxTests {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var path: String { directory.appendingPathComponent("outbox.sqlite").path }

    func entry(_ id: String, app: String = "app", ttl: Int64 = 60, at ms: UInt64 = 1_000) -> Outbox.Entry {
        Outbox.Entry(apiKey: "key", appID: app, message: UpstreamMessageTests.message(id: id, ttl: ttl), acceptedAtMs: ms)
    }

    @Test func messagesOutliveTheProcessAndFailWhenTheirTTLRunsOut() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            let outbox = try Outbox(path: path, maxPendingPerApp: 10)
            try outbox.add(entry("late", ttl: 30))
            try outbox.add(entry("soon", ttl: 5))
            try outbox.add(entry("other", app: "other", ttl: 5))
        }
        // Opened again, as after a restart: everything is there.
        let outbox = try Outbox(path: path, maxPendingPerApp: 10)
        #expect(try outbox.all().map(\.message.messageID).sorted() == ["late", "other", "soon"])
        #expect(try outbox.all().first { $0.message.messageID == "soon" }?.message == UpstreamMessageTests.message(id: "soon", ttl: 5))
        #expect(try outbox.nextExpiryMs() == 6_000)
        #expect(try outbox.failExpired(nowMs: 5_999).isEmpty)
        let failed = try outbox.failExpired(nowMs: 6_000)
        #expect(failed.map(\.message.messageID).sorted() == ["other", "soon"])
        #expect(failed.first?.verdict == .failed(Outbox.Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of 5 s")))
        #expect(try outbox.nextExpiryMs() == 31_000)
        // Failed messages wait for their app, which is told once.
        #expect(try outbox.takeSettled(apiKey: "key", appID: "app").map(\.message.messageID) == ["soon"])
        #expect(try outbox.takeSettled(apiKey: "key", appID: "app").isEmpty)
        #expect(try outbox.all().map(\.message.messageID).sorted() == ["late", "other"])
        #expect(try outbox.settle(apiKey: "key", appID: "app", messageID: "late", .succeeded) != nil)
        #expect(try outbox.nextExpiryMs() == nil)
    }

    @Test func idsAreUniquePerAPIKeyAndEachAppHasItsLimit() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try Outbox(path: path, maxPendingPerApp: 2)
        try outbox.add(entry("one"))
        #expect(throws: Outbox.Refusal.duplicateID) { try outbox.add(entry("one")) }
        // Apps of one API key share a registration id: not even another app may use a pending id.
        #expect(throws: Outbox.Refusal.duplicateID) { try outbox.add(entry("one", app: "other")) }
        try outbox.add(entry("one-other", app: "other"))
        try outbox.add(entry("two"))
        #expect(throws: Outbox.Refusal.full(limit: 2)) { try outbox.add(entry("three")) }
        #expect(try outbox.all().count == 3)
    }

    @Test func verdictsWaitForTheAppAndComeOnce() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try Outbox(path: path, maxPendingPerApp: 10)
        // Accepted in this order within the same millisecond: the order holds.
        for id in ["c", "a", "b"] { try outbox.add(entry(id)) }
        try outbox.add(entry("x", app: "other"))
        #expect(try outbox.pending(apiKey: "key").map(\.message.messageID) == ["c", "a", "b", "x"])

        let failure = Outbox.Failure(error: "INVALID_PARAMETERS", description: "not this project")
        #expect(try outbox.settle(apiKey: "key", appID: "app", messageID: "a", .succeeded)?.verdict == .succeeded)
        #expect(try outbox.settle(apiKey: "key", appID: "app", messageID: "c", .failed(failure))?.message.messageID == "c")
        // A verdict repeated (after a reconnect), or for a message never seen, changes nothing.
        #expect(try outbox.settle(apiKey: "key", appID: "app", messageID: "a", .failed(failure)) == nil)
        #expect(try outbox.settle(apiKey: "key", appID: "app", messageID: "nope", .succeeded) == nil)
        // Settled messages are no longer sent, nor counted against the limit, and their ids may be used again.
        #expect(try outbox.pending(apiKey: "key").map(\.message.messageID) == ["b", "x"])
        #expect(try outbox.failExpired(nowMs: 1_000_000).map(\.message.messageID) == ["b", "x"])

        // Kept across a restart until the app is told, in the order of acceptance.
        let reopened = try Outbox(path: path, maxPendingPerApp: 10)
        let told = try reopened.takeSettled(apiKey: "key", appID: "app")
        #expect(told.map(\.message.messageID) == ["c", "a", "b"])
        #expect(told.map(\.verdict) == [.failed(failure), .succeeded,
                                         .failed(Outbox.Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of 60 s"))])
        #expect(try reopened.takeSettled(apiKey: "key", appID: "app").isEmpty)
        #expect(try reopened.all().map(\.message.messageID) == ["x"])
    }

    @Test func anOpenChannelSparesItsKeyFromTheLocalTTL() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try Outbox(path: path, maxPendingPerApp: 10)
        try outbox.add(entry("carried", ttl: 5))
        try outbox.add(Outbox.Entry(apiKey: "second key", appID: "app", message: UpstreamMessageTests.message(id: "local", ttl: 10),
                                    acceptedAtMs: 1_000))
        try outbox.add(entry("now", ttl: 0, at: 2_000))
        // The channel of "key" is open: only the other key's messages expire here.
        #expect(try outbox.nextExpiryMs(sparing: ["key"]) == 11_000)
        #expect(try outbox.failExpired(nowMs: 20_000, sparing: ["key"]).map(\.message.messageID) == ["local"])
        // It closed: what ran out meanwhile fails now; TTL 0 was now or never.
        #expect(try outbox.nextExpiryMs() == 2_000)
        let failed = try outbox.failExpired(nowMs: 20_000)
        #expect(failed.map(\.message.messageID) == ["carried", "now"])
        guard case .failed(let failure) = failed.last?.verdict else { Issue.record("no failure for 'now'"); return }
        #expect(failure.error == "SERVICE_NOT_AVAILABLE")
    }
}
