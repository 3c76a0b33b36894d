import NearbyCore
import Testing

@Suite struct MessageRulesTests {
    @Test func contentMustBeOneByteTo100KiB() throws {
        #expect(throws: NearbyError.self) { try MessageRules.checkContent([]) }
        #expect(throws: NearbyError.self) { try MessageRules.checkContent([UInt8](repeating: 0, count: 102_401)) }
        try MessageRules.checkContent([0])
        try MessageRules.checkContent([UInt8](repeating: 0, count: 102_400))
    }

    @Test func typesAreShortWithoutWildcards() throws {
        try MessageRules.checkType("")
        try MessageRules.checkType(String(repeating: "é", count: 32))
        #expect(throws: NearbyError.invalidArguments("type is 33 characters; the maximum is 32")) {
            try MessageRules.checkType(String(repeating: "t", count: 33))
        }
        #expect(throws: NearbyError.self) { try MessageRules.checkType("a*") }
        #expect(throws: NearbyError.self) { try MessageRules.checkType("a\nb") }
    }

    @Test func namespacesFollowTheRules() throws {
        for good in ["", "demo", "my-app.v2", "A_b"] { try MessageRules.checkNamespace(good) }
        for bad in ["with space", "ümlaut", "__reserved", String(repeating: "n", count: 65), "a/b"] {
            #expect(throws: NearbyError.self, "\(bad)") { try MessageRules.checkNamespace(bad) }
        }
    }

    @Test func filtersResolveTheProjectNamespace() {
        let all = MessageFilter()
        #expect(all.matches(namespace: "", type: "x", projectNamespace: "p"))
        #expect(all.matches(namespace: "p", type: "x", projectNamespace: "p"))
        #expect(!all.matches(namespace: "other", type: "x", projectNamespace: "p"))
        let typed = MessageFilter(namespace: "other", type: "x")
        #expect(typed.matches(namespace: "other", type: "x", projectNamespace: "p"))
        #expect(!typed.matches(namespace: "other", type: "y", projectNamespace: "p"))
    }
}

@Suite struct StrategyTests {
    let both: Set<Medium> = [.ble, .audio]

    @Test func defaultsDropMediumsTheDaemonLacks() throws {
        let strategy = try Strategy().validated(for: .publication, enabled: [.ble], explicitMediums: false)
        #expect(strategy.mediums == [.ble])
        #expect(strategy.ttlSeconds == 300)
    }

    @Test func askingForADisabledMediumIsNotSupported() {
        #expect(throws: NearbyError.notSupported("medium audio is disabled in this daemon's configuration")) {
            try Strategy(mediums: [.audio]).validated(for: .publication, enabled: [.ble], explicitMediums: true)
        }
    }

    @Test func ttlBoundsDependOnTheOwner() throws {
        #expect(throws: NearbyError.self) { try Strategy(ttlSeconds: 0).validated(for: .publication, enabled: both, explicitMediums: false) }
        _ = try Strategy(ttlSeconds: 0).validated(for: .subscription, enabled: both, explicitMediums: false)
        _ = try Strategy(ttlSeconds: 86_400).validated(for: .publication, enabled: both, explicitMediums: false)
        #expect(throws: NearbyError.self) { try Strategy(ttlSeconds: 86_401).validated(for: .subscription, enabled: both, explicitMediums: false) }
    }

    @Test func contradictionsAreInvalid() {
        #expect(throws: NearbyError.self) {
            try Strategy(mediums: [.ble], distance: .earshot).validated(for: .publication, enabled: both, explicitMediums: true)
        }
        #expect(throws: NearbyError.self) {
            try Strategy(mediums: [.audio], allowInBackground: true).validated(for: .publication, enabled: both, explicitMediums: true)
        }
        #expect(throws: NearbyError.self) { try Strategy(mediums: []).validated(for: .publication, enabled: both, explicitMediums: true) }
    }

    @Test func modesSayWhoBroadcastsAndWhoListens() {
        #expect(DiscoveryMode.both.broadcasts && DiscoveryMode.both.scans)
        #expect(DiscoveryMode.broadcast.broadcasts && !DiscoveryMode.broadcast.scans)
        #expect(!DiscoveryMode.scan.broadcasts && DiscoveryMode.scan.scans)
    }
}

@Suite struct TokenTests {
    @Test func tokensAreEightBytesOfHex() throws {
        let token = try #require(Token(hex: "00ff10A0b1c2d3e4"))
        #expect(token.hex == "00ff10a0b1c2d3e4")
        #expect(Token(hex: "00ff") == nil)
        #expect(Token(hex: "zz00000000000000") == nil)
        #expect(Token(bytes: [1, 2, 3]) == nil)
    }
}
