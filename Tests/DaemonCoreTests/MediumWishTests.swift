@_spi(Testing) import DaemonCore
import NearbyCore
import Testing

/// What each medium is asked for, from what runs: the links' tokens and the
/// listening the foreground and the background ask for.
struct MediumWishTests {
    private let alice = Account(uid: 1000, apiKey: "key-a")
    private let bob = Account(uid: 1001, apiKey: "key-b")
    private final class ManagerID {}
    private let manager = ObjectIdentifier(ManagerID())
    private let tokenA = Token(bytes: Array(repeating: 0xA, count: Token.byteCount))!
    private let tokenB = Token(bytes: Array(repeating: 0xB, count: Token.byteCount))!

    private func runs(_ entries: [(String, Account, Set<Medium>, DiscoveryMode, Placement)]) -> RunTable {
        var table = RunsByID()
        for (id, account, mediums, mode, placement) in entries {
            table.set(id, to: Run(account: account, manager: manager, strategy: Strategy(mediums: mediums, mode: mode),
                                  nearby: placement))
        }
        return table.table
    }

    @Test func eachLinkThatBroadcastsOnAMediumHasItsTokenThere() {
        let table = runs([("p1", alice, [.ble, .audio], .broadcast, .foreground), ("p2", bob, [.ble], .broadcast, .foreground)])
        let tokens: [Account: Token?] = [alice: tokenA, bob: tokenB]
        #expect(MediumWish.of(.ble, runs: table, tokens: tokens) == MediumWish(tokens: [tokenA, tokenB], scanMode: .off))
        #expect(MediumWish.of(.audio, runs: table, tokens: tokens) == MediumWish(tokens: [tokenA], scanMode: .off))
    }

    @Test func aLinkWithoutAValidTokenBroadcastsNothing() {
        let table = runs([("p1", alice, [.ble], .both, .foreground)])
        #expect(MediumWish.of(.ble, runs: table, tokens: [alice: nil]) == MediumWish(tokens: [], scanMode: .full))
    }

    @Test func theBackgroundListensWithLowPowerUnlessAnyoneListensFully() {
        let background = runs([("s1", alice, [.ble], .scan, .background)])
        #expect(MediumWish.of(.ble, runs: background, tokens: [alice: tokenA]).scanMode == .lowPower)
        let both = runs([("s1", alice, [.ble], .scan, .background), ("s2", bob, [.ble], .scan, .foreground)])
        #expect(MediumWish.of(.ble, runs: both, tokens: [alice: tokenA, bob: tokenB]).scanMode == .full)
        // Audio never runs in the background.
        let audio = runs([("s1", alice, [.ble, .audio], .both, .background)])
        #expect(MediumWish.of(.audio, runs: audio, tokens: [alice: tokenA]) == MediumWish())
    }

    @Test func beaconSubscriptionsListenOnBLEAlone() {
        let table = RunTable()
        #expect(MediumWish.of(.ble, runs: table, tokens: [:], beacons: .lowPower).scanMode == .lowPower)
        #expect(MediumWish.of(.audio, runs: table, tokens: [:], beacons: .full).scanMode == .off)
        // A link's full listening outranks the beacons' low power; the beacons' full outranks a background link's.
        let background = runs([("s1", alice, [.ble], .scan, .background)])
        #expect(MediumWish.of(.ble, runs: background, tokens: [alice: tokenA], beacons: .full).scanMode == .full)
    }

    @Test func onlyAWishThatAsksLessWaits() {
        let small = MediumWish(tokens: [tokenA], scanMode: .lowPower)
        #expect(MediumWish(tokens: [tokenA, tokenB], scanMode: .lowPower).covers(small))
        #expect(MediumWish(tokens: [tokenA], scanMode: .full).covers(small))
        #expect(small.covers(small))
        #expect(!MediumWish(tokens: [tokenB], scanMode: .full).covers(small))
        #expect(!MediumWish(tokens: [tokenA], scanMode: .off).covers(small))
    }
}
