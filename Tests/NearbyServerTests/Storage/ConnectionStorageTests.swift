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
        func expiredPendingMessagesAreSettledSoonestFirst(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                for (id, expiry) in [("m1", startMs + 30), ("m2", startMs + 10), ("m3", startMs + 20), ("m4", startMs + 40)] {
                    #expect(try await storage.acceptUpstream(Self.upstream(id, expiresAtMs: expiry), limit: 10) == .kept)
                }
                // TTL 0: in time for the grace after it was received.
                #expect(try await storage.acceptUpstream(Self.upstream("m0", expiresAtMs: startMs), limit: 10) == .kept)
                _ = try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m3", verdict: .sent, atMs: startMs)
                let failed = UpstreamVerdict.failed(error: "TTL_EXCEEDED", description: "late")
                func settle(atMs: UInt64, limit: Int = 10) async throws -> [String] {
                    try await storage.settleExpiredUpstream(nowMs: atMs, graceMs: 15, limit: limit) { _ in failed }.map {
                        #expect($0.verdict == failed)
                        return $0.messageId
                    }
                }
                #expect(try await settle(atMs: startMs + 9).isEmpty)
                #expect(try await settle(atMs: startMs + 30, limit: 1) == ["m0"])
                #expect(try await settle(atMs: startMs + 30) == ["m2", "m1"])
                #expect(try await settle(atMs: startMs + 30).isEmpty)
                // What is claimed, a replica's session holds: not settled until the claim lapses.
                let claimed = try await storage.claimUpstream(project: "alpha", replica: "r1", nowMs: startMs + 39,
                                                              untilMs: startMs + 50, graceMs: 15, limit: 10)
                #expect(claimed.map(\.messageId) == ["m4"])
                #expect(try await settle(atMs: startMs + 45).isEmpty)
                #expect(try await settle(atMs: startMs + 50) == ["m4"])
                let settled = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10)
                #expect(settled.isEmpty)
                // Purging takes the settled messages whose time ran out.
                try await storage.purgeSettledUpstream(expiredBeforeMs: startMs + 35)
                #expect(try await storage.acceptUpstream(Self.upstream("m1"), limit: 10) == .kept)
                if case .known = try await storage.acceptUpstream(Self.upstream("m4"), limit: 10) {} else {
                    Issue.record("m4's verdict is kept until its time runs out")
                }
            }
        }

        @Test(arguments: Engine.allCases)
        func aClaimedMessageIsHandedToOneReplicaUntilReleasedOrLapsed(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                for id in ["m1", "m2", "m3"] {
                    #expect(try await storage.acceptUpstream(Self.upstream(id, expiresAtMs: startMs + 1000), limit: 10) == .kept)
                }
                _ = try await storage.addReceipt(StoredReceipt(project: "alpha", messageId: "dr2:x", payload: "{}"), limit: 10)
                func claim(_ replica: String, atMs: UInt64, forMs: UInt64 = 100, limit: Int = 10) async throws -> [String] {
                    try await storage.claimUpstream(project: "alpha", replica: replica, nowMs: atMs, untilMs: atMs + forMs,
                                                    graceMs: 0, limit: limit).map(\.messageId)
                }
                func claimReceipts(_ replica: String, atMs: UInt64) async throws -> [String] {
                    try await storage.claimReceipts(project: "alpha", replica: replica, nowMs: atMs, untilMs: atMs + 100, limit: 10)
                        .map(\.messageId)
                }
                #expect(try await claim("r1", atMs: startMs, limit: 2) == ["m1", "m2"])
                #expect(try await claim("r2", atMs: startMs) == ["m3"])
                #expect(try await claim("r2", atMs: startMs).isEmpty)
                #expect(try await claimReceipts("r1", atMs: startMs) == ["dr2:x"])
                #expect(try await claimReceipts("r2", atMs: startMs).isEmpty)
                // Another replica's release gives back nothing of r1's.
                let pending = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10)
                try await storage.releaseClaims(replica: "r2", upstream: pending.map(\.position), receipts: [])
                #expect(try await claim("r3", atMs: startMs) == ["m3"])
                // r1 renews m2 only: m1 goes back at once; m2 stays r1's past the first lease.
                try await storage.renewClaims(replica: "r1", upstream: [pending[1].position], receipts: [], untilMs: startMs + 300)
                #expect(try await claim("r2", atMs: startMs + 1) == ["m1"])
                #expect(try await claimReceipts("r2", atMs: startMs + 1) == ["dr2:x"])
                // Claims not renewed lapse (r2's own, r3's); r1's renewed one holds.
                #expect(try await claim("r2", atMs: startMs + 200, forMs: 1000) == ["m1", "m3"])
                // r1 dies: its claim lapses too, and another replica takes the message.
                #expect(try await claim("r2", atMs: startMs + 300) == ["m2"])
                // An ack settles it whoever holds it: it is never handed out again.
                _ = try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m2", verdict: .sent, atMs: startMs)
                try await storage.releaseAllClaims()
                #expect(try await claim("r1", atMs: startMs + 301) == ["m1", "m3"])
                #expect(try await claimReceipts("r1", atMs: startMs + 301) == ["dr2:x"])
                // Out of time is not handed out; TTL 0 is, within the grace.
                #expect(try await storage.acceptUpstream(Self.upstream("z", expiresAtMs: startMs), limit: 10) == .kept)
                try await storage.releaseAllClaims()
                #expect(try await storage.claimUpstream(project: "alpha", replica: "r1", nowMs: startMs + 1000, untilMs: startMs + 2000,
                                                        graceMs: 10, limit: 10).isEmpty)
                #expect(try await storage.claimUpstream(project: "alpha", replica: "r1", nowMs: startMs + 5, untilMs: startMs + 2000,
                                                        graceMs: 10, limit: 10).map(\.messageId) == ["m1", "m3", "z"])
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
