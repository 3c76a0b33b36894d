import Foundation
import HTTPTypes
@testable import NearbyServer
import ServerAPI
import Testing
import TestSupport

/// `GET /v1/ready` says whether the server can serve: a load balancer in
/// front of replicas sends devices elsewhere while a replica's database does
/// not answer. `/v1/health` (liveness) answers regardless.
@Suite(.timeLimit(.minutes(2))) struct ReadinessTests {
    /// A check whose query never returns, even when cancelled (a connection
    /// whose peer went silent), is answered at the deadline all the same.
    @Test func anOperationThatIgnoresCancellationIsNotWaitedFor() async {
        let asked = ContinuousClock.now
        let outcome = await FirstOutcome.race(within: .milliseconds(100)) {
            await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        }
        guard case .failure(let error) = outcome else { Issue.record("no timeout: \(outcome)"); return }
        #expect(error is FirstOutcome.TimedOut)
        // Without the race this waits forever; the bound leaves room for a
        // loaded test machine, where a 100 ms timer can fire seconds late.
        #expect(ContinuousClock.now - asked < .seconds(30))
        #expect(await FirstOutcome.race(within: .seconds(60)) {} .isSuccess)
    }

    @Test func readyOnSQLite() async throws {
        try await withServer { harness in
            let ready = try await harness.request(.get, APIPath.ready)
            #expect(try decode([String: String].self, ready) == ["status": "ready"])
        }
    }

    /// PostgreSQL stopped under the server: not ready (503 unavailable, within
    /// the readiness timeout), alive; started again: ready again, without a
    /// restart of the server.
    @Test func readinessFollowsThePostgreSQLServer() async throws {
        let cluster = try await PostgresCluster.start()
        do {
            let url = try await cluster.createDatabase()
            try await withServer(configure: { $0.databaseURL = url }) { harness in
                #expect(try await harness.request(.get, APIPath.ready).status == .ok)

                try await cluster.stopServer()
                let asked = ContinuousClock.now
                let down = try await harness.request(.get, APIPath.ready)
                expectError(down, .serviceUnavailable, .unavailable, mentioning: "the database does not answer")
                #expect(ContinuousClock.now - asked < NearbyService.readinessTimeout + .seconds(10))
                #expect(try await harness.request(.get, APIPath.health).status == .ok)

                try await cluster.startServer()
                // The pool connects again by itself; each check waits at most
                // the readiness timeout, and a few are allowed.
                var ready = false
                for _ in 0..<10 where !ready {
                    ready = try await harness.request(.get, APIPath.ready).status == .ok
                }
                #expect(ready, "not ready again after PostgreSQL came back")
                let key = try await harness.createProject("alpha")
                _ = try await harness.register(apiKey: key)
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }
}

private extension Result {
    var isSuccess: Bool { if case .success = self { true } else { false } }
}
