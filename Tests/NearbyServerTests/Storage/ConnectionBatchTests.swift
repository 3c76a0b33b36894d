import Foundation
@testable import NearbyServer
import Testing

extension StorageTests {
    /// The connection server's group commit as each engine applies it: many
    /// writes in one transaction, each with its own outcome, as if they had
    /// been applied one after the other.
    @Suite struct ConnectionBatch {
        typealias C = StorageTests.Connection

        static func outcomes(_ results: [Result<ConnectionWriteResult, any Error>]) -> [ConnectionWriteResult?] {
            results.map { try? $0.get() }
        }

        @Test(arguments: Engine.allCases)
        func aBatchKeepsEachDevicesMessagesWithinItsLimitAndAnswersRepeats(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                for device in ["d1", "d2"] { try await createDevice(storage, device, of: "alpha") }
                #expect(try await storage.acceptUpstream(C.upstream("old", device: "d2"), limit: 3) == .kept)
                let old = try #require(try await storage.pendingUpstream(project: "alpha", after: 0, limit: 1).first)

                let results = try await storage.write([
                    .acceptUpstream(C.upstream("m1"), limit: 2),
                    .acceptUpstream(C.upstream("m1", device: "d2"), limit: 3),
                    // A repeat within the batch: the message as the batch keeps it.
                    .acceptUpstream(C.upstream("m1"), limit: 2),
                    .acceptUpstream(C.upstream("old", device: "d2"), limit: 3),
                    .acceptUpstream(C.upstream("m2"), limit: 2),
                    // d1 has two now: full, counting the batch's own.
                    .acceptUpstream(C.upstream("m3"), limit: 2),
                    .acceptUpstream(C.upstream("m1", device: "gone"), limit: 2),
                    .acceptUpstream(C.upstream("m2", device: "d2"), limit: 3),
                ])
                let pending = try await storage.pendingUpstream(project: "alpha", after: old.position, limit: 10)
                // Kept in the order they came.
                #expect(pending.map { "\($0.device)/\($0.messageId)" } == ["d1/m1", "d2/m1", "d1/m2", "d2/m2"])
                #expect(Self.outcomes(results) == [
                    .accepted(.kept), .accepted(.kept), .accepted(.known(pending[0])), .accepted(.known(old)), .accepted(.kept),
                    .accepted(.full(2)), nil, .accepted(.kept),
                ])
                // The device that does not exist fails alone.
                if case .success = results[6] { Issue.record("a message of a device that does not exist was kept") }
            }
        }

        @Test(arguments: Engine.allCases)
        func aBatchSettlesAsOneSettlementAfterTheOther(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                // The same id from two apps: two messages.
                for app in ["a1", "a2"] { #expect(try await storage.acceptUpstream(C.upstream("m1", app: app), limit: 10) == .kept) }
                #expect(try await storage.acceptUpstream(C.upstream("m2"), limit: 10) == .kept)
                let pending = try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10)
                let failed = UpstreamVerdict.failed(error: "TTL_EXCEEDED", description: "late")
                let results = try await storage.write([
                    .settleUpstream(project: "alpha", device: "d1", messageId: "m1", verdict: .sent, atMs: startMs),
                    .settleUpstream(project: "alpha", device: "d1", messageId: "m2", verdict: failed, atMs: startMs),
                    .settleUpstream(project: "alpha", device: "d1", messageId: "m1", verdict: .sent, atMs: startMs),
                    // Three settlements of m1, two messages: the third finds none.
                    .settleUpstream(project: "alpha", device: "d1", messageId: "m1", verdict: .sent, atMs: startMs),
                    .settleUpstream(project: "beta", device: "d1", messageId: "m2", verdict: .sent, atMs: startMs),
                ])
                func settled(_ index: Int, _ verdict: UpstreamVerdict) -> ConnectionWriteResult {
                    .settled(C.stored(pending[index], at: pending[index].position, verdict: verdict))
                }
                #expect(Self.outcomes(results) == [settled(0, .sent), settled(2, failed), settled(1, .sent), .settled(nil), .settled(nil)])
                #expect(try await storage.pendingUpstream(project: "alpha", after: 0, limit: 10).isEmpty)
                // The verdicts are kept: a repeat is answered with its own.
                #expect(try await storage.acceptUpstream(C.upstream("m2"), limit: 10)
                    == .known(C.stored(pending[2], at: pending[2].position, verdict: failed)))
            }
        }

        /// A renewal made while a hand-out is under way keeps the claims it
        /// does not name: they are that hand-out's, not yet its sessions'.
        @Test(arguments: Engine.allCases)
        func aRenewalThatKeepsOthersGivesUpNothing(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                for id in ["m1", "m2"] { #expect(try await storage.acceptUpstream(C.upstream(id), limit: 10) == .kept) }
                let claimed = try await storage.claimUpstream(project: "alpha", replica: "r1", nowMs: startMs, untilMs: startMs + 50,
                                                              graceMs: 0, limit: 10)
                #expect(claimed.map(\.messageId) == ["m1", "m2"])
                try await storage.renewClaims(replica: "r1", upstream: [claimed[0].position], receipts: [], untilMs: startMs + 500,
                                              releasingOthers: false)
                // m2 is still r1's, until its own lease lapses; m1's was extended.
                #expect(try await storage.claimUpstream(project: "alpha", replica: "r2", nowMs: startMs + 1, untilMs: startMs + 600,
                                                        graceMs: 0, limit: 10).isEmpty)
                #expect(try await storage.claimUpstream(project: "alpha", replica: "r2", nowMs: startMs + 50, untilMs: startMs + 600,
                                                        graceMs: 0, limit: 10).map(\.messageId) == ["m2"])
                // Releasing the others (no hand-out under way) gives them up at once.
                try await storage.renewClaims(replica: "r2", upstream: [], receipts: [], untilMs: startMs + 600)
                #expect(try await storage.claimUpstream(project: "alpha", replica: "r3", nowMs: startMs + 51, untilMs: startMs + 600,
                                                        graceMs: 0, limit: 10).map(\.messageId) == ["m2"])
            }
        }

        /// A batch's claim takes the project's receipts first and its upstream
        /// messages in the places left; renewals and releases name both.
        @Test(arguments: Engine.allCases)
        func aClaimTakesReceiptsFirstAndMessagesInThePlacesLeft(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                for id in ["m1", "m2"] {
                    #expect(try await storage.acceptUpstream(C.upstream(id, expiresAtMs: startMs + 1000), limit: 10) == .kept)
                }
                for id in ["r1", "r2"] {
                    _ = try await storage.addReceipt(StoredReceipt(project: "alpha", messageId: id, payload: "{}"), limit: 10)
                }
                func claim(_ replica: String, atMs: UInt64, limit: Int) async throws -> (receipts: [StoredReceipt], upstream: [StoredUpstream]) {
                    let results = try await storage.write([
                        .claim(project: "alpha", replica: replica, nowMs: atMs, untilMs: atMs + 100, graceMs: 0, limit: limit),
                    ])
                    guard case .claimed(let receipts, let upstream) = try results[0].get() else { throw GroupCommitMismatch() }
                    return (receipts, upstream)
                }
                func ids(_ claimed: (receipts: [StoredReceipt], upstream: [StoredUpstream])) -> [String] {
                    claimed.receipts.map(\.messageId) + claimed.upstream.map(\.messageId)
                }
                // A receipt fills the one place.
                #expect(ids(try await claim("A", atMs: startMs, limit: 1)) == ["r1"])
                // Three places: the receipt left, then the messages.
                let b = try await claim("B", atMs: startMs, limit: 3)
                #expect(ids(b) == ["r2", "m1", "m2"])
                // B keeps m1 and gives up the rest at once.
                try await storage.renewClaims(replica: "B", upstream: [b.upstream[0].position], receipts: [], untilMs: startMs + 300)
                let c = try await claim("C", atMs: startMs + 1, limit: 10)
                #expect(ids(c) == ["r2", "m2"])
                // C releases its receipt only.
                try await storage.releaseClaims(replica: "C", upstream: [], receipts: [c.receipts[0].position])
                let d = try await claim("D", atMs: startMs + 2, limit: 10)
                #expect(ids(d) == ["r2"])
                // D renews its receipt; A's and C's claims lapse, B's renewed one holds.
                try await storage.renewClaims(replica: "D", upstream: [], receipts: [d.receipts[0].position], untilMs: startMs + 500,
                                              releasingOthers: false)
                let e = ids(try await claim("E", atMs: startMs + 150, limit: 10))
                #expect(e == ["r1", "m2"])
                #expect(ids(try await claim("F", atMs: startMs + 240, limit: 10)).isEmpty)
                // B's lapses at 300, E's at 250; D's renewed receipt holds.
                let g = ids(try await claim("G", atMs: startMs + 300, limit: 10))
                #expect(g == ["r1", "m1", "m2"])
            }
        }

        @Test(arguments: Engine.allCases)
        func aClaimSeesTheRestOfItsBatch(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                #expect(try await storage.acceptUpstream(C.upstream("m1"), limit: 10) == .kept)
                let first = try await storage.claimUpstream(project: "alpha", replica: "r1", nowMs: startMs, untilMs: startMs + 50,
                                                            graceMs: 0, limit: 10)
                #expect(first.map(\.messageId) == ["m1"])
                // Asked for in another order, applied by stage: the claim last.
                let results = try await storage.write([
                    .claim(project: "alpha", replica: "r1", nowMs: startMs, untilMs: startMs + 50, graceMs: 0, limit: 10),
                    .releaseClaims(replica: "r1", upstream: first.map(\.position), receipts: []),
                    .acceptUpstream(C.upstream("m2"), limit: 10),
                    .addDownstream(C.downstream("down"), limit: 1),
                    .addDownstream(C.downstream("down-2"), limit: 1),
                ])
                guard case .claimed(let receipts, let upstream) = try results[0].get() else {
                    Issue.record("a claim answered \(results[0])")
                    return
                }
                #expect(receipts.isEmpty)
                #expect(upstream.map(\.messageId) == ["m1", "m2"])
                #expect(Self.outcomes(Array(results.dropFirst())) == [.released, .accepted(.kept), .added(true), .added(false)])
                #expect(try await storage.pendingDownstream(device: "d1").map(\.messageId) == ["down"])
            }
        }
    }
}
