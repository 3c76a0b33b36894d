import Foundation
@testable import NearbyServer
import Testing

extension StorageTests {
    /// The connection server's part: server keys, upstream and downstream messages, receipts.
    @Suite struct Connection {
        static func upstream(_ messageId: String, device: String = "d1", app: String = "app", expiresAtMs: UInt64 = startMs + 100)
            -> StoredUpstream {
            StoredUpstream(project: "alpha", device: device, app: app, messageId: messageId, data: ["k": messageId, "n": "1"],
                           receivedAtMs: startMs, expiresAtMs: expiresAtMs)
        }

        static func downstream(_ messageId: String, device: String = "d1", expiresAtMs: UInt64 = startMs + 100,
                               receiptRequested: Bool = false) -> StoredDownstream {
            StoredDownstream(project: "alpha", device: device, messageId: messageId, data: ["m": messageId], receivedAtMs: startMs,
                             expiresAtMs: expiresAtMs, receiptRequested: receiptRequested)
        }

        /// `message` as storage returns it: with its position and verdict.
        static func stored(_ message: StoredUpstream, at position: Int64, verdict: UpstreamVerdict? = nil) -> StoredUpstream {
            var message = message
            message.position = position
            message.verdict = verdict
            return message
        }

        @Test(arguments: Engine.allCases)
        func theServerKeyIsReplaced(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await storage.replaceServerKey(project: "alpha", serverKeyHash: hash("server-2"), createdAtMs: startMs + 1)
                #expect(try await !storage.isServerKey(hash("server-alpha"), of: "alpha"))
                #expect(try await storage.isServerKey(hash("server-2"), of: "alpha"))
                await #expect(throws: StorageError.projectNotFound("nope")) {
                    try await storage.replaceServerKey(project: "nope", serverKeyHash: hash("server-3"), createdAtMs: startMs)
                }
            }
        }

        @Test(arguments: Engine.allCases)
        func upstreamMessagesAreKeptOnceWithinTheDevicesLimit(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                try await createDevice(storage, "d2", of: "alpha")
                #expect(try await storage.acceptUpstream(Self.upstream("m1"), limit: 2) == .kept)
                let pending = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10)
                let first = try #require(pending.first)
                #expect(pending == [Self.stored(Self.upstream("m1"), at: first.position)])
                // A repeat, even with other data: the message as first kept.
                var repeated = Self.upstream("m1")
                repeated.data = [:]
                #expect(try await storage.acceptUpstream(repeated, limit: 2) == .known(first))
                // The same id from another app is another message.
                #expect(try await storage.acceptUpstream(Self.upstream("m1", app: "other"), limit: 2) == .kept)
                #expect(try await storage.acceptUpstream(Self.upstream("m2"), limit: 2) == .full(2))
                #expect(try await storage.acceptUpstream(Self.upstream("m2", device: "d2"), limit: 2) == .kept)

                let all = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10)
                #expect(all.map(\.messageId) == ["m1", "m1", "m2"])
                #expect(all.map(\.position) == all.map(\.position).sorted())
                #expect(try await storage.pendingUpstream(project: "alpha", after: first.position, limit: 1).map(\.app) == ["other"])
                #expect(try await storage.pendingUpstream(project: "beta", after: 0, limit: 10).isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func aSettledMessageKeepsItsVerdictUntilPurged(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                #expect(try await storage.acceptUpstream(Self.upstream("m1", expiresAtMs: startMs + 10), limit: 2) == .kept)
                #expect(try await storage.acceptUpstream(Self.upstream("m2", expiresAtMs: startMs + 20), limit: 2) == .kept)
                let positions = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10).map(\.position)

                #expect(try await storage.settleUpstream(project: "beta", device: "d1", messageId: "m1", verdict: .sent, atMs: startMs) == nil)
                let sent = try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m1", verdict: .sent, atMs: startMs)
                #expect(sent == Self.stored(Self.upstream("m1", expiresAtMs: startMs + 10), at: positions[0], verdict: .sent))
                #expect(try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m1", verdict: .sent, atMs: startMs) == nil)
                let failed = UpstreamVerdict.failed(error: "SERVICE_UNAVAILABLE", description: "no server")
                #expect(try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m2", verdict: failed, atMs: startMs)?
                    .verdict == failed)
                #expect(try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10).isEmpty)
                // A repeat is answered with the verdict; the settled still count.
                #expect(try await storage.acceptUpstream(Self.upstream("m2"), limit: 2)
                    == .known(Self.stored(Self.upstream("m2", expiresAtMs: startMs + 20), at: positions[1], verdict: failed)))
                #expect(try await storage.acceptUpstream(Self.upstream("m3"), limit: 2) == .full(2))

                // Purged: settled, expired before the time.
                try await storage.purgeSettledUpstream(expiredBeforeMs: startMs + 20)
                #expect(try await storage.acceptUpstream(Self.upstream("m1"), limit: 2) == .kept)
                #expect(try await storage.acceptUpstream(Self.upstream("m3"), limit: 2) == .full(2))
            }
        }

        @Test(arguments: Engine.allCases)
        func expiredPendingMessagesAreFoundSoonestFirst(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                for (id, expiry) in [("m1", startMs + 30), ("m2", startMs + 10), ("m3", startMs + 20), ("m4", startMs + 40)] {
                    #expect(try await storage.acceptUpstream(Self.upstream(id, expiresAtMs: expiry), limit: 10) == .kept)
                }
                _ = try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m3", verdict: .sent, atMs: startMs)
                #expect(try await storage.expiredUpstream(nowMs: startMs + 30, limit: 10).map(\.messageId) == ["m2", "m1"])
                #expect(try await storage.expiredUpstream(nowMs: startMs + 30, limit: 1).map(\.messageId) == ["m2"])
                #expect(try await storage.expiredUpstream(nowMs: startMs + 9, limit: 10).isEmpty)
                // Purging touches only settled messages.
                try await storage.purgeSettledUpstream(expiredBeforeMs: .max)
                #expect(try await storage.expiredUpstream(nowMs: .max, limit: 10).map(\.messageId) == ["m2", "m1", "m4"])
                // A device's messages go with it.
                #expect(try await storage.deleteDevice(id: "d1"))
                #expect(try await storage.expiredUpstream(nowMs: .max, limit: 10).isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func downstreamMessagesWaitForTheirDeviceWithinItsLimit(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                try await createDevice(storage, "d2", of: "alpha")
                #expect(try await storage.addDownstream(Self.downstream("m2", receiptRequested: true), limit: 3))
                #expect(try await storage.addDownstream(Self.downstream("m1"), limit: 3))
                #expect(try await storage.addDownstream(Self.downstream("m2", expiresAtMs: startMs + 5), limit: 3))
                #expect(try await !storage.addDownstream(Self.downstream("m3"), limit: 3))
                #expect(try await storage.addDownstream(Self.downstream("m3", device: "d2"), limit: 3))
                #expect(try await storage.pendingDownstream(device: "d1")
                    == [Self.downstream("m2", receiptRequested: true), Self.downstream("m1"), Self.downstream("m2", expiresAtMs: startMs + 5)])

                // The oldest of that id.
                #expect(try await storage.removeDownstream(device: "d1", messageId: "m2") == Self.downstream("m2", receiptRequested: true))
                #expect(try await storage.removeDownstream(device: "d2", messageId: "m1") == nil)
                #expect(try await storage.pendingDownstream(device: "d1").map(\.messageId) == ["m1", "m2"])
                #expect(try await storage.addDownstream(Self.downstream("m4", expiresAtMs: startMs + 5), limit: 3))

                #expect(try await storage.removeExpiredDownstream(nowMs: startMs + 4).isEmpty)
                #expect(try await storage.removeExpiredDownstream(nowMs: startMs + 5)
                    == [Self.downstream("m2", expiresAtMs: startMs + 5), Self.downstream("m4", expiresAtMs: startMs + 5)])
                #expect(try await storage.pendingDownstream(device: "d1") == [Self.downstream("m1")])
                #expect(try await storage.deleteDevice(id: "d1"))
                #expect(try await storage.pendingDownstream(device: "d1").isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func receiptsKeepTheNewestWithinTheProjectsLimit(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                func receipt(_ id: String, _ project: String = "alpha") -> StoredReceipt {
                    StoredReceipt(project: project, messageId: "dr2:\(id)", payload: "{\"id\":\"\(id)\"}")
                }
                #expect(try await storage.addReceipt(receipt("r1"), limit: 2) == 0)
                #expect(try await storage.addReceipt(receipt("r2"), limit: 2) == 0)
                #expect(try await storage.addReceipt(receipt("r1", "beta"), limit: 2) == 0)
                #expect(try await storage.addReceipt(receipt("r3"), limit: 2) == 1)
                let kept = try await storage.receipts(project: "alpha", after: 0, limit: 10)
                #expect(kept.map(\.messageId) == ["dr2:r2", "dr2:r3"])
                #expect(kept.map(\.payload) == ["{\"id\":\"r2\"}", "{\"id\":\"r3\"}"])
                #expect(kept.allSatisfy { $0.project == "alpha" })
                #expect(try await storage.receipts(project: "alpha", after: kept[0].position, limit: 10).map(\.messageId) == ["dr2:r3"])
                #expect(try await storage.receipts(project: "alpha", after: 0, limit: 1).map(\.messageId) == ["dr2:r2"])
                // A smaller limit drops all beyond it.
                #expect(try await storage.addReceipt(receipt("r4"), limit: 1) == 2)

                #expect(try await storage.removeReceipt(project: "alpha", messageId: "dr2:r4"))
                #expect(try await !storage.removeReceipt(project: "alpha", messageId: "dr2:r4"))
                #expect(try await !storage.removeReceipt(project: "alpha", messageId: "dr2:r1"))
                #expect(try await storage.receipts(project: "beta", after: 0, limit: 10).map(\.messageId) == ["dr2:r1"])
            }
        }
    }
}
