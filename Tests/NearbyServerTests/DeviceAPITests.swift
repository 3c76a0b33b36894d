import Foundation
import Hummingbird
import HummingbirdTesting
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

@Suite struct DeviceAPITests {
    @Test func health() async throws {
        try await withServer { harness in
            let response = try await harness.request(.get, APIPath.health)
            #expect(try decode([String: String].self, response) == ["status": "ok"])
        }
    }

    @Test func registrationWithGoodAndBadKeys() async throws {
        try await withServer { harness in
            let key = try await harness.createProject("alpha")
            let device = try await harness.register(apiKey: key)
            #expect(device.registration.project == "alpha")
            #expect(device.registration.namespace == "alpha")
            #expect(device.id.count == 22)
            #expect(device.registration.secret.count == 43)
            let second = try await harness.register(apiKey: key)
            #expect(second.id != device.id)
            #expect(second.registration.secret != device.registration.secret)

            expectError(try await harness.request(.post, APIPath.devices), .unauthorized, .unauthenticated, mentioning: "X-Api-Key")
            expectError(try await harness.request(.post, APIPath.devices, headers: [HTTPAPI.apiKeyField: "nope"]),
                        .unauthorized, .unauthenticated, mentioning: "unknown API key")
        }
    }

    @Test func deviceLimitPerProject() async throws {
        try await withServer(configure: { $0.limits.maxDevicesPerProject = 2 }) { harness in
            let key = try await harness.createProject("alpha")
            _ = try await harness.register(apiKey: key)
            _ = try await harness.register(apiKey: key)
            expectError(try await harness.request(.post, APIPath.devices, headers: [HTTPAPI.apiKeyField: key]),
                        .tooManyRequests, .limitExceeded, mentioning: "max-devices-per-project")
            // Other projects have their own count.
            _ = try await harness.register(apiKey: try await harness.createProject("beta"))
        }
    }

    @Test func deviceRoutesNeedTheDevicesOwnSecret() async throws {
        try await withServer { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            let paths: [(HTTPRequest.Method, String)] = [
                (.post, APIPath.tokens(a.id)),
                (.get, APIPath.publications(a.id)),
                (.put, APIPath.publication(a.id, "p1")),
                (.delete, APIPath.publication(a.id, "p1")),
                (.get, APIPath.subscriptions(a.id)),
                (.put, APIPath.subscription(a.id, "s1")),
                (.delete, APIPath.subscription(a.id, "s1")),
                (.post, APIPath.sightings(a.id)),
                (.post, APIPath.changes(a.id)),
                (.get, APIPath.stream(a.id)),
                (.delete, APIPath.device(a.id)),
            ]
            for (method, path) in paths {
                expectError(try await harness.request(method, path), .unauthorized, .unauthenticated, mentioning: "Authorization")
                expectError(try await harness.request(method, path, headers: [.authorization: "Bearer wrong"]),
                            .unauthorized, .unauthenticated, mentioning: "unknown device secret")
                expectError(try await harness.request(method, path, headers: [.authorization: "Basic abc"]),
                            .unauthorized, .unauthenticated, mentioning: "Bearer")
                // b's valid secret on a's path.
                expectError(try await harness.request(method, path, headers: b.auth), .forbidden, .permissionDenied)
            }
            let unauthorized = try await harness.request(.get, APIPath.publications(a.id))
            #expect(unauthorized.headers[.wwwAuthenticate] == "Bearer")
        }
    }

    @Test func oneDeviceCannotTouchAnothersObjects() async throws {
        try await withServer { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            try await harness.publish(a, "p1")
            try await harness.subscribe(a, "s1")

            // b sees only its own (empty) lists, and cannot delete a's ids through its own path.
            let bPublications = try decode(PublicationList.self,
                                           try await harness.request(.get, APIPath.publications(b.id), headers: b.auth))
            #expect(bPublications.publications.isEmpty)
            expectError(try await harness.request(.delete, APIPath.publication(b.id, "p1"), headers: b.auth), .notFound, .notFound)
            expectError(try await harness.request(.delete, APIPath.subscription(b.id, "s1"), headers: b.auth), .notFound, .notFound)
            expectError(try await harness.request(.delete, APIPath.publication(a.id, "p1"), headers: b.auth),
                        .forbidden, .permissionDenied)
            expectError(try await harness.request(.get, APIPath.subscriptions(a.id), headers: b.auth), .forbidden, .permissionDenied)
            // Nor report sightings as a.
            expectError(try await harness.request(.post, APIPath.sightings(a.id), as: b, json: SightingReport()),
                        .forbidden, .permissionDenied)

            let aPublications = try decode(PublicationList.self,
                                           try await harness.request(.get, APIPath.publications(a.id), headers: a.auth))
            #expect(aPublications.publications.map(\.id) == ["p1"])
        }
    }

    @Test func aDeletedDevicesCachedSecretIsRefusedAtOnce() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            #expect(try await harness.request(.get, APIPath.publications(device.id), headers: device.auth).status == .ok)
            let secretHash = Credentials.hash(device.registration.secret)
            #expect(harness.service.authenticated.withLock { $0.device(secretHash: secretHash) }?.id == device.id)

            #expect(try await harness.request(.delete, APIPath.device(device.id), headers: device.auth).status == .noContent)
            expectError(try await harness.request(.get, APIPath.publications(device.id), headers: device.auth),
                        .unauthorized, .unauthenticated, mentioning: "unknown device secret")
            expectError(try await harness.request(.delete, APIPath.device(device.id), headers: device.auth),
                        .unauthorized, .unauthenticated)
        }
    }

    @Test func unregister() async throws {
        try await withServer { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            let token = try await harness.issueToken(a)
            try await harness.publish(a, "p1")
            let response = try await harness.request(.delete, APIPath.device(a.id), headers: a.auth)
            #expect(response.status == .noContent)
            expectError(try await harness.request(.get, APIPath.publications(a.id), headers: a.auth), .unauthorized, .unauthenticated)
            #expect(try await harness.report(b, seen: [(token.token, .ble)]) == [.unknown])
            #expect(try await harness.service.storage.publications(device: nil).isEmpty)
        }
    }
}

@Suite struct TokenTests {
    @Test func issueRotateExpire() async throws {
        try await withServer(configure: {
            $0.tokenLifetimeSeconds = 600
            $0.tokenOverlapSeconds = 60
        }) { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            let first = try await harness.issueToken(a)
            #expect(first.expiresAtMs == startMs + 600_000)
            #expect(first.refreshAtMs == startMs + 540_000)
            #expect(try await harness.report(b, seen: [(first.token, .ble)]) == [.ok])

            // Rotation at refresh time: both tokens are valid during the overlap.
            harness.clock.advance(bySeconds: 540)
            let second = try await harness.issueToken(a)
            #expect(second.token != first.token)
            #expect(second.expiresAtMs == startMs + 1_140_000)
            #expect(try await harness.report(b, seen: [(first.token, .ble), (second.token, .audio)]) == [.ok, .ok])

            harness.clock.advance(bySeconds: 60)
            #expect(try await harness.report(b, seen: [(first.token, .ble), (second.token, .ble)]) == [.expired, .ok])

            // Swept from memory, still known to storage as expired.
            await harness.service.sweep()
            #expect(try await harness.report(b, seen: [(first.token, .ble)]) == [.expired])

            // A day after expiry the token is forgotten.
            harness.clock.advance(bySeconds: 86_400)
            await harness.service.sweep()
            #expect(try await harness.report(b, seen: [(first.token, .ble)]) == [.unknown])

            let never = Token(bytes: [1, 2, 3, 4, 5, 6, 7, 8])!
            #expect(try await harness.report(b, seen: [(never, .ble)]) == [.unknown])
        }
    }

    @Test func ownTokenIsOkButMatchesNothing() async throws {
        try await withServer(live: true) { harness in
            let device = try await harness.devices(1)[0]
            let token = try await harness.issueToken(device)
            try await harness.publish(device, "p1")
            try await harness.subscribe(device, "s1")
            let stream = try await harness.openStream(device)
            #expect(try await harness.report(device, seen: [(token.token, .ble)]) == [.ok])
            try await stream.expectNothingPushed()
            try await stream.close()
        }
    }

    @Test func tokensAreRandomAndUnique() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            var seen = Set<Token>()
            for _ in 0..<50 {
                seen.insert(try await harness.issueToken(device).token)
                harness.clock.advance(bySeconds: 540)
            }
            #expect(seen.count == 50)
        }
    }

    /// Asking again before the refresh time gives the same token and stores
    /// nothing, so a device cannot pile up tokens.
    @Test func askingBeforeRefreshGivesTheSameToken() async throws {
        try await withServer(configure: {
            $0.tokenLifetimeSeconds = 600
            $0.tokenOverlapSeconds = 60
        }) { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            let first = try await harness.issueToken(a)
            for _ in 0..<10 { #expect(try await harness.issueToken(a) == first) }
            harness.clock.advance(byMs: 539_999)
            #expect(try await harness.issueToken(a) == first)
            harness.clock.advance(byMs: 1)
            let second = try await harness.issueToken(a)
            #expect(second.token != first.token)
            #expect(second.refreshAtMs == harness.clock.nowMs + 540_000)
            #expect(try await harness.issueToken(a) == second)

            // Requests at once are answered in the device's turn: one token for all.
            let answers = try await withThrowingTaskGroup(of: Token.self) { group in
                for _ in 0..<20 { group.addTask { try await harness.issueToken(b).token } }
                return try await group.reduce(into: Set<Token>()) { $0.insert($1) }
            }
            #expect(answers.count == 1)

            let stored = try await harness.service.storage.liveTokens(nowMs: harness.clock.nowMs)
            #expect(stored.filter { $0.device == a.id }.count == 2)
            #expect(Set(stored.filter { $0.device == a.id }.map(\.token)) == [first.token, second.token])
            #expect(Set(stored.filter { $0.device == b.id }.map(\.token)) == answers)
        }
    }
}
