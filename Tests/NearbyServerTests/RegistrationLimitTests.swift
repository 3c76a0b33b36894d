import Foundation
@testable import NearbyServer
import ServerAPI
import TestSupport
import Testing

/// The token buckets, with time moved by hand.
@Suite(.timeLimit(.minutes(1)))
struct RegistrationLimiterTests {
    @Test func aBucketRefillsOneTokenPerInterval() {
        var bucket = TokenBucket(perMinute: 3)
        #expect(bucket.intervalMs == 20_000)
        for _ in 0..<3 {
            #expect(bucket.wait(nowMs: startMs) == 0)
            bucket.take(nowMs: startMs)
        }
        #expect(bucket.wait(nowMs: startMs) == 20_000)
        #expect(bucket.wait(nowMs: startMs + 19_999) == 1)
        #expect(bucket.wait(nowMs: startMs + 20_000) == 0)
        bucket.take(nowMs: startMs + 20_000)
        #expect(bucket.wait(nowMs: startMs + 20_000) == 20_000)
        #expect(!bucket.isFull(nowMs: startMs + 79_999))
        #expect(bucket.isFull(nowMs: startMs + 80_000))
    }

    @Test func aRefusalTakesNothing() throws {
        let limiter = RegistrationLimiter(limits: .init(perAddressPerMinute: 2, perProjectPerMinute: 3))
        let a = ClientAddress("10.0.0.1"), b = ClientAddress("10.0.0.2")
        try limiter.admit(from: a, project: "alpha", nowMs: startMs)
        try limiter.admit(from: a, project: "alpha", nowMs: startMs)
        // The address is refused: the project keeps its token for another address.
        #expect(throws: RegistrationLimiter.Refusal(limit: .address, retryAfterMs: 30_000)) {
            try limiter.admit(from: a, project: "alpha", nowMs: startMs)
        }
        try limiter.admit(from: b, project: "alpha", nowMs: startMs)
        // The project is refused: b keeps its second token for another project.
        #expect(throws: RegistrationLimiter.Refusal(limit: .project, retryAfterMs: 20_000)) {
            try limiter.admit(from: b, project: "alpha", nowMs: startMs)
        }
        try limiter.admit(from: b, project: "beta", nowMs: startMs)
    }

    /// Beyond the addresses it tracks, new addresses share one bucket: many
    /// addresses gain nothing over one, and memory stays bounded.
    @Test func untrackedAddressesShareOneBucket() throws {
        let limiter = RegistrationLimiter(limits: .init(perAddressPerMinute: 2, perProjectPerMinute: 1000, maxTrackedAddresses: 2))
        try limiter.admit(from: ClientAddress("10.0.0.1"), project: "alpha", nowMs: startMs)
        try limiter.admit(from: ClientAddress("10.0.0.2"), project: "alpha", nowMs: startMs)
        try limiter.admit(from: ClientAddress("10.0.0.3"), project: "alpha", nowMs: startMs)
        try limiter.admit(from: ClientAddress("10.0.0.4"), project: "alpha", nowMs: startMs)
        #expect(throws: RegistrationLimiter.Refusal.self) {
            try limiter.admit(from: ClientAddress("10.0.0.5"), project: "alpha", nowMs: startMs)
        }
        #expect(limiter.trackedAddresses == 2)
        // Once the tracked ones are full again they are forgotten, and room is made.
        limiter.sweep(nowMs: startMs + 60_000)
        #expect(limiter.trackedAddresses == 0)
        try limiter.admit(from: ClientAddress("10.0.0.5"), project: "alpha", nowMs: startMs + 60_000)
    }
}

/// Registrations over HTTP from real clients (curl, from several loopback
/// addresses), against the server's clock moved by hand.
@Suite(.timeLimit(.minutes(2)))
struct RegistrationLimitTests {
    /// `curl -X POST /v1/devices` from `source`: the status, the Retry-After, the body.
    static func register(_ port: Int, apiKey: String, from source: String) async throws -> (status: Int, retryAfter: String?, body: String) {
        let result = try await runProgram("/usr/bin/curl", [
            "-sS", "-i", "-X", "POST", "--interface", source, "-H", "\(ServerAPI.apiKeyHeader): \(apiKey)",
            "http://127.0.0.1:\(port)\(APIPath.devices)",
        ])
        let response = try #require(RawResponse.all(in: result.output).first, "\(result.output)")
        return (response.status, response.headers["retry-after"], response.body)
    }

    /// The report's attack, at the limits' edges: one address registers as
    /// fast as it can; then many addresses do.
    @Test func registrationsAreLimitedPerAddressThenPerProject() async throws {
        try await withServer(live: true, configure: {
            $0.limits.registrationsPerAddressPerMinute = 3
            $0.limits.registrationsPerProjectPerMinute = 5
        }) { harness in
            let port = try #require(harness.client.port)
            let key = try await harness.createProject("alpha")
            for _ in 0..<3 { #expect(try await Self.register(port, apiKey: key, from: "127.0.0.1").status == 201) }
            let refused = try await Self.register(port, apiKey: key, from: "127.0.0.1")
            #expect(refused.status == 429)
            #expect(refused.retryAfter == "20")
            let error = try JSONDecoder().decode(APIError.self, from: Data(refused.body.utf8))
            #expect(error.error == .rateLimited)
            #expect(error.message.contains("[limits] registrations-per-address-per-minute"))

            // Another address: the project has two left.
            for _ in 0..<2 { #expect(try await Self.register(port, apiKey: key, from: "127.0.0.2").status == 201) }
            let projectRefused = try await Self.register(port, apiKey: key, from: "127.0.0.3")
            #expect(projectRefused.status == 429)
            #expect(projectRefused.retryAfter == "12")
            #expect(projectRefused.body.contains("[limits] registrations-per-project-per-minute"))
            // Another project is not affected.
            #expect(try await Self.register(port, apiKey: try await harness.createProject("beta"), from: "127.0.0.3").status == 201)

            // A token comes back after its interval: 20 s for the address, 12 s for the project.
            harness.clock.advance(bySeconds: 19)
            #expect(try await Self.register(port, apiKey: key, from: "127.0.0.1").status == 429)
            harness.clock.advance(bySeconds: 1)
            #expect(try await Self.register(port, apiKey: key, from: "127.0.0.1").status == 201)
            #expect(try await Self.register(port, apiKey: key, from: "127.0.0.1").status == 429)

            // Wrong keys are refused as before, and take nothing.
            #expect(try await Self.register(port, apiKey: "nope", from: "127.0.0.4").status == 401)
        }
    }
}
