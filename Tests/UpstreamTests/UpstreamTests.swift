import Foundation
import GRDB
import NearbyCore
import ServerAPI
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
        try Self.message(data: ["k": String(repeating: "v", count: 4095)], ttl: Int64(CCSRules.maximumTimeToLiveSeconds)).validate()
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
        (message(ttl: Int64(CCSRules.maximumTimeToLiveSeconds) + 1), "ttl_seconds 2419201"),
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
    static let key = Account(uid: 1000, apiKey: "key")

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("outbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var path: String { directory.appendingPathComponent("outbox.sqlite").path }

    static func limits(perApp: Int = 10, perUser: Int = 100, total: Int = 1000, retentionMs: UInt64 = 60_000) -> Outbox.Limits {
        Outbox.Limits(pendingPerApp: perApp, rowsPerUser: perUser, rows: total, retentionMs: retentionMs)
    }

    func open(_ limits: Outbox.Limits = limits()) throws -> Outbox {
        try Outbox(path: path, limits: limits)
    }

    func entry(_ id: String, app: String = "app", ttl: Int64 = 60, at ms: UInt64 = 1_000, account: Account = key) -> Outbox.Entry {
        Outbox.Entry(account: account, appID: app, message: UpstreamMessageTests.message(id: id, ttl: ttl), acceptedAtMs: ms)
    }

    @Test func messagesOutliveTheProcessAndFailWhenTheirTTLRunsOut() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            let outbox = try open()
            try await outbox.add(entry("late", ttl: 30))
            try await outbox.add(entry("soon", ttl: 5))
            try await outbox.add(entry("other", app: "other", ttl: 5))
        }
        // Reopened, as after a crash.
        let outbox = try open()
        #expect(try await outbox.all().map(\.message.messageID).sorted() == ["late", "other", "soon"])
        #expect(try await outbox.all().first { $0.message.messageID == "soon" }?.message == UpstreamMessageTests.message(id: "soon", ttl: 5))
        #expect(try await outbox.nextExpiryMs() == 6_000)
        #expect(try await outbox.failExpired(nowMs: 5_999).isEmpty)
        let failed = try await outbox.failExpired(nowMs: 6_000)
        #expect(failed.map(\.message.messageID) == ["soon", "other"])
        #expect(failed.first?.verdict == .failed(Outbox.Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of 5 s")))
        #expect(try await outbox.nextExpiryMs() == 31_000)
        // The failure waits for its app, then is taken out once.
        #expect(try await outbox.takeSettled(Self.key, appID: "app").map(\.message.messageID) == ["soon"])
        #expect(try await outbox.takeSettled(Self.key, appID: "app").isEmpty)
        #expect(try await outbox.all().map(\.message.messageID).sorted() == ["late", "other"])
        #expect(try await outbox.settle(Self.key, appID: "app", messageID: "late", .succeeded, nowMs: 7_000) != nil)
        #expect(try await outbox.nextExpiryMs() == nil)
    }

    @Test func idsAreUniquePerAccountAndEachLimitHolds() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try open(Self.limits(perApp: 2, perUser: 3, total: 5))
        try await outbox.add(entry("one"))
        await #expect(throws: Outbox.Refusal.duplicateID) { try await outbox.add(entry("one")) }
        // Another app of the same account: the registration id and message id would clash at the application server.
        await #expect(throws: Outbox.Refusal.duplicateID) { try await outbox.add(entry("one", app: "other")) }
        try await outbox.add(entry("two"))
        await #expect(throws: Outbox.Refusal.appFull(limit: 2)) { try await outbox.add(entry("three")) }
        try await outbox.add(entry("one-other", app: "other"))
        // The user's third row fills the user's share, whatever the app.
        await #expect(throws: Outbox.Refusal.userFull(limit: 3)) { try await outbox.add(entry("four", app: "third")) }
        // Another user, same key and app: its own ids and its own share; the total bounds both.
        let stranger = Account(uid: 2000, apiKey: "key")
        try await outbox.add(entry("one", account: stranger))
        try await outbox.add(entry("two", account: stranger))
        await #expect(throws: Outbox.Refusal.full(limit: 5)) { try await outbox.add(entry("three", app: "x", account: stranger)) }
        #expect(try await outbox.all().count == 5)
    }

    @Test func anotherUserNeverSeesOrTakesAnAppsMessagesOrVerdicts() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try open()
        let stranger = Account(uid: 65534, apiKey: "key")
        try await outbox.add(entry("mine"))
        #expect(try await outbox.pending(stranger).isEmpty)
        // A verdict in the stranger's name for the same app and id settles nothing of mine.
        #expect(try await outbox.settle(stranger, appID: "app", messageID: "mine", .succeeded, nowMs: 2_000) == nil)
        #expect(try await outbox.settle(Self.key, appID: "app", messageID: "mine", .succeeded, nowMs: 2_000) != nil)
        #expect(try await outbox.takeSettled(stranger, appID: "app").isEmpty)
        #expect(try await outbox.takeSettled(Self.key, appID: "app").map(\.message.messageID) == ["mine"])
    }

    @Test func verdictsWaitForTheAppAndComeOnce() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try open()
        // Accepted in this order within the same millisecond: the order holds.
        for id in ["c", "a", "b"] { try await outbox.add(entry(id)) }
        try await outbox.add(entry("x", app: "other"))
        #expect(try await outbox.pending(Self.key).map(\.message.messageID) == ["c", "a", "b", "x"])

        let failure = Outbox.Failure(error: "INVALID_PARAMETERS", description: "not this project")
        #expect(try await outbox.settle(Self.key, appID: "app", messageID: "a", .succeeded, nowMs: 2_000)?.verdict == .succeeded)
        #expect(try await outbox.settle(Self.key, appID: "app", messageID: "c", .failed(failure), nowMs: 2_000)?.message.messageID == "c")
        // A verdict repeated (after a reconnect), or for a message never seen, changes nothing.
        #expect(try await outbox.settle(Self.key, appID: "app", messageID: "a", .failed(failure), nowMs: 2_000) == nil)
        #expect(try await outbox.settle(Self.key, appID: "app", messageID: "nope", .succeeded, nowMs: 2_000) == nil)
        // Settled messages are no longer sent, nor counted against the app's limit, and their ids may be used again.
        #expect(try await outbox.pending(Self.key).map(\.message.messageID) == ["b", "x"])
        #expect(try await outbox.failExpired(nowMs: 1_000_000).map(\.message.messageID) == ["b", "x"])

        // Kept across a restart until the app is told, in the order of acceptance.
        let reopened = try open()
        let told = try await reopened.takeSettled(Self.key, appID: "app")
        #expect(told.map(\.message.messageID) == ["c", "a", "b"])
        #expect(told.map(\.verdict) == [.failed(failure), .succeeded,
                                         .failed(Outbox.Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of 60 s"))])
        #expect(try await reopened.takeSettled(Self.key, appID: "app").isEmpty)
        #expect(try await reopened.all().map(\.message.messageID) == ["x"])

        // Taken out for an app that left before it heard: kept for its next manager.
        try await reopened.keep(told[0], nowMs: 3_000)
        #expect(try await reopened.takeSettled(Self.key, appID: "app").map(\.verdict) == [.failed(failure)])
    }

    @Test func untoldVerdictsGoAfterTheRetention() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try open(Self.limits(retentionMs: 10_000))
        try await outbox.add(entry("early"))
        try await outbox.add(entry("late"))
        try await outbox.add(entry("pending"))
        _ = try await outbox.settle(Self.key, appID: "app", messageID: "early", .succeeded, nowMs: 5_000)
        _ = try await outbox.settle(Self.key, appID: "app", messageID: "late", .succeeded, nowMs: 8_000)
        #expect(try await outbox.dropUntold(nowMs: 14_999) == 0)
        #expect(try await outbox.dropUntold(nowMs: 15_000) == 1)
        // A pending message is the TTL's to end, never the retention's.
        #expect(try await outbox.dropUntold(nowMs: 1_000_000) == 1)
        #expect(try await outbox.all().map(\.message.messageID) == ["pending"])
    }

    @Test func rowsFromBeforeUsersBelongToNobodyAndGoWithTheRetention() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        // An outbox as the daemon wrote it before apps had a user (migrations v1 to v3).
        do {
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                try db.execute(sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2'), ('v3');
                    CREATE TABLE outbox (apiKey TEXT NOT NULL, appID TEXT NOT NULL, messageID TEXT NOT NULL,
                        recipient TEXT NOT NULL, data TEXT NOT NULL, ttlSeconds INTEGER NOT NULL, acceptedAtMs INTEGER NOT NULL,
                        expiresAtMs INTEGER NOT NULL, failure TEXT, failureDescription TEXT, succeeded INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (apiKey, appID, messageID));
                    INSERT INTO outbox VALUES ('key', 'app', 'old', 'shop@nearby.example', '{}', 60, 1000, 61000, 'TTL_EXCEEDED', '', 0);
                    """)
            }
        }
        let outbox = try open(Self.limits(retentionMs: 10_000))
        #expect(try await outbox.all().map(\.message.messageID) == ["old"])
        #expect(try await outbox.takeSettled(Self.key, appID: "app").isEmpty)
        #expect(try await outbox.dropUntold(nowMs: 11_000) == 1)
    }

    @Test func anOpenChannelSparesItsAccountFromTheLocalTTL() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let outbox = try open()
        let second = Account(uid: 1000, apiKey: "second key")
        try await outbox.add(entry("carried", ttl: 5))
        try await outbox.add(entry("local", ttl: 10, account: second))
        try await outbox.add(entry("now", ttl: 0, at: 2_000))
        // The channel of the first account is open: only the other's messages expire here.
        #expect(try await outbox.nextExpiryMs(sparing: [Self.key]) == 11_000)
        #expect(try await outbox.failExpired(nowMs: 20_000, sparing: [Self.key]).map(\.message.messageID) == ["local"])
        // It closed: what ran out meanwhile fails now; TTL 0 was now or never.
        #expect(try await outbox.nextExpiryMs() == 2_000)
        let failed = try await outbox.failExpired(nowMs: 20_000)
        #expect(failed.map(\.message.messageID) == ["carried", "now"])
        guard case .failed(let failure) = failed.last?.verdict else { Issue.record("no failure for 'now'"); return }
        #expect(failure.error == "SERVICE_NOT_AVAILABLE")
    }
}
