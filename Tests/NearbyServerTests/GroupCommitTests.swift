import Foundation
@testable import NearbyServer
import Synchronization
import Testing
import TestSupport

/// Group commit: what the connection server's sessions and channels ask for
/// while a transaction commits goes together in the next one, and each
/// learns its own outcome once its transaction has committed.
@Suite(.timeLimit(.minutes(1))) struct GroupCommitTests {
    /// Commits batches that each answer a receipt's removal with whether its
    /// id is even; the first waits until `release` is called.
    final class Storage: Sendable {
        private let state = Mutex((batches: [[String]](), committed: 0))
        private let (started, starting) = AsyncStream.makeStream(of: Void.self)
        private let (gate, opening) = AsyncStream.makeStream(of: Void.self)

        var batches: [[String]] { state.withLock { $0.batches } }
        /// Batches whose commit has returned.
        var committed: Int { state.withLock { $0.committed } }

        func commit(_ writes: [ConnectionWrite]) async throws -> [Result<ConnectionWriteResult, any Error>] {
            let ids = writes.map { write in
                guard case .removeReceipt(_, let id) = write else { return "?" }
                return id
            }
            let first = state.withLock { state in
                state.batches.append(ids)
                return state.batches.count == 1
            }
            if first {
                starting.yield()
                for await _ in gate { break }
            }
            if ids.contains("bad") { throw CancellationError() }
            defer { state.withLock { $0.committed += 1 } }
            return ids.map { .success(.removed((Int($0) ?? 1) % 2 == 0)) }
        }

        /// Waits until the first batch's commit has begun.
        func firstCommitStarted() async throws {
            try await withTimeout(10, "the first commit") { for await _ in self.started { break } }
        }

        func release() { opening.yield() }
    }

    static func removal(_ id: String) -> ConnectionWrite { .removeReceipt(project: "alpha", messageId: id) }

    @Test func writesAskedDuringACommitGoTogetherInTheNextAndAreAnsweredAfterIt() async throws {
        let storage = Storage()
        let writer = ConnectionWriter(commit: storage.commit)
        let first = writer.enqueue(Self.removal("0"))
        try await storage.firstCommitStarted()
        let rest = (1...50).map { writer.enqueue(Self.removal("\($0)")) }
        storage.release()
        #expect(try await withTimeout(10, "the first write's outcome") { try await first.result() } == .removed(true))
        #expect(storage.committed >= 1)
        for (index, pending) in rest.enumerated() {
            let outcome = try await withTimeout(10, "write \(index + 1)'s outcome") { try await pending.result() }
            #expect(outcome == .removed((index + 1) % 2 == 0))
        }
        // One transaction for the first, one for the fifty asked while it committed.
        #expect(storage.batches == [["0"], (1...50).map { "\($0)" }])
        #expect(storage.committed == 2)
    }

    @Test func aBatchThatFailsFailsEachOfItsWritesAndTheNextCommits() async throws {
        let storage = Storage()
        let writer = ConnectionWriter(commit: storage.commit)
        let first = writer.enqueue(Self.removal("0"))
        try await storage.firstCommitStarted()
        let failing = [writer.enqueue(Self.removal("1")), writer.enqueue(Self.removal("bad"))]
        storage.release()
        #expect(try await withTimeout(10, "the first outcome") { try await first.result() } == .removed(true))
        for pending in failing {
            await #expect(throws: CancellationError.self) { try await withTimeout(10, "a failed write") { try await pending.result() } }
        }
        let later = writer.enqueue(Self.removal("2"))
        #expect(try await withTimeout(10, "the next write's outcome") { try await later.result() } == .removed(true))
        #expect(storage.batches == [["0"], ["1", "bad"], ["2"]])
    }
}
