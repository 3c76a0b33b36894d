@_spi(Testing) import DaemonCore
import NearbyCore
import Testing

/// What runs where, and what a change tells the daemon's other parts: the
/// links' use of each medium, which links start listening, the managers
/// whose mediums in use change.
struct RunTableTests {
    private let alice = Account(uid: 1000, apiKey: "key-a")
    private let bob = Account(uid: 1001, apiKey: "key-b")
    private final class ManagerID {}
    private let manager1 = ObjectIdentifier(ManagerID())
    private let manager2 = ObjectIdentifier(ManagerID())

    private func run(_ account: Account, _ manager: ObjectIdentifier, _ mediums: Set<Medium>, _ mode: DiscoveryMode,
                     _ nearby: Placement?, beacons: Bool = false) -> Run {
        Run(account: account, manager: manager, strategy: Strategy(mediums: mediums, mode: mode), nearby: nearby, beacons: beacons)
    }

    @Test func aForegroundPublicationBroadcastsOnEachOfItsMediums() {
        var table = RunsByID()
        let change = table.set("p1", to: run(alice, manager1, [.ble, .audio], .broadcast, .foreground))
        #expect(change.mediumsChanged)
        #expect(change.startedListening.isEmpty)
        #expect(change.managers == [manager1])
        #expect(table.usage(of: alice, on: .ble) == LinkUsage(broadcasting: 1))
        #expect(table.usage(of: alice, on: .audio) == LinkUsage(broadcasting: 1))
        #expect(table.mediums(usedBy: manager1) == [.ble, .audio])
        #expect(table.nearby("p1") == .foreground)
    }

    @Test func theBackgroundKeepsBLEAloneAndListensWithLowPower() {
        var table = RunsByID()
        table.set("s1", to: run(alice, manager1, [.ble, .audio], .scan, .foreground))
        #expect(table.usage(of: alice, on: .audio) == LinkUsage(scanning: 1, fullScanning: 1))
        let change = table.set("s1", to: run(alice, manager1, [.ble, .audio], .scan, .background))
        #expect(change.mediumsChanged)
        #expect(table.usage(of: alice, on: .ble) == LinkUsage(scanning: 1, fullScanning: 0))
        #expect(table.usage(of: alice, on: .audio) == LinkUsage())
        #expect(!table.scans(alice, on: .audio))
        // The manager's objects still use both: its error properties do not move with the placement.
        #expect(change.managers.isEmpty)
        #expect(table.mediums(usedBy: manager1) == [.ble, .audio])
    }

    @Test func onlyTheFirstListenerStartsALinksListening() {
        var table = RunsByID()
        let first = table.set("s1", to: run(alice, manager1, [.ble], .scan, .foreground))
        #expect(first.startedListening == [alice: [.ble]])
        let second = table.set("s2", to: run(alice, manager2, [.ble], .both, .foreground))
        #expect(second.startedListening.isEmpty)
        // The second also broadcasts, which the first did not: the wish changes.
        #expect(second.mediumsChanged)
        let other = table.set("s3", to: run(bob, manager2, [.ble], .scan, .foreground))
        #expect(other.startedListening == [bob: [.ble]])
        #expect(!table.set("s4", to: run(bob, manager2, [.ble], .scan, .foreground)).mediumsChanged)
    }

    @Test func aManagerBackInTheForegroundStartsItsLinksListeningOnAudio() {
        var table = RunsByID()
        table.set("s1", to: run(alice, manager1, [.ble, .audio], .scan, .background))
        let back = table.set("s1", to: run(alice, manager1, [.ble, .audio], .scan, .foreground))
        // The link is told what audio already hears, as for an object that starts.
        #expect(back.startedListening == [alice: [.audio]])
        #expect(back.mediumsChanged)
    }

    @Test func aWaitingRunIsNoRun() {
        var table = RunsByID()
        table.set("p1", to: run(alice, manager1, [.ble], .broadcast, .foreground))
        let change = table.set("p1", to: run(alice, manager1, [.ble], .broadcast, nil))
        #expect(table["p1"] == nil)
        #expect(change.mediumsChanged)
        #expect(change.managers == [manager1])
        #expect(table.usage(of: alice, on: .ble) == LinkUsage())
        #expect(table.mediums(usedBy: manager1).isEmpty)
        #expect(table.totals.links.isEmpty && table.totals.managers.isEmpty)
        #expect(table.set("p1", to: nil) == RunChange())
    }

    @Test func aBeaconPartListensOnBLEForItsManagerButNotForItsLink() {
        var table = RunsByID()
        let change = table.set("s1", to: run(alice, manager1, [.ble, .audio], .scan, nil, beacons: true))
        #expect(change.mediumsChanged)
        #expect(change.startedListening.isEmpty)
        #expect(table.mediums(usedBy: manager1) == [.ble])
        #expect(table.usage(of: alice, on: .ble) == LinkUsage())
        #expect(table.beaconsRun("s1"))
        #expect(table.nearby("s1") == nil)
        let stopped = table.set("s1", to: nil)
        #expect(stopped.mediumsChanged)
        #expect(stopped.managers == [manager1])
    }

    @Test func anObjectRunsWhenPermittedAndInTheForegroundOrAllowedInTheBackground() {
        #expect(Placement.of(permitted: true, background: false, allowInBackground: false) == .foreground)
        #expect(Placement.of(permitted: true, background: false, allowInBackground: true) == .foreground)
        #expect(Placement.of(permitted: true, background: true, allowInBackground: true) == .background)
        #expect(Placement.of(permitted: true, background: true, allowInBackground: false) == nil)
        #expect(Placement.of(permitted: false, background: false, allowInBackground: true) == nil)
        #expect(Placement.waitingReason(permitted: false) == "the app is not permitted to use Nearby (PermissionGranted)")
        #expect(Placement.waitingReason(permitted: true) == "its manager is in the background, and it has no AllowInBackground")
    }

    @Test func aRevokedPermissionStopsAPublicationAndAGrantResumesIt() {
        var table = RunsByID()
        let publication = RunRequest(account: alice, manager: manager1, strategy: Strategy(mediums: [.ble], mode: .broadcast))
        let started = table.reconcile("p1", publication, permitted: true, background: false)
        #expect(started.nearby == .started)
        #expect(started.change.mediumsChanged)
        #expect(table.reconcile("p1", publication, permitted: true, background: false) == Transition())
        let revoked = table.reconcile("p1", publication, permitted: false, background: false)
        #expect(revoked.nearby == .stopped)
        #expect(revoked.change.managers == [manager1])
        #expect(table["p1"] == nil)
        #expect(table.reconcile("p1", publication, permitted: true, background: false).nearby == .started)
        #expect(table.end("p1").nearby == .stopped)
        #expect(table.end("p1") == Transition())
    }

    @Test func theBackgroundMovesWhatMayRunThereAndStopsTheRest() {
        var table = RunsByID()
        var strategy = Strategy(mediums: [.ble, .audio], mode: .scan)
        strategy.allowInBackground = true
        let allowed = RunRequest(account: alice, manager: manager1, strategy: strategy)
        let other = RunRequest(account: alice, manager: manager1, strategy: Strategy(mediums: [.ble], mode: .broadcast))
        table.reconcile("s1", allowed, permitted: true, background: false)
        table.reconcile("p1", other, permitted: true, background: false)
        let moved = table.reconcile("s1", allowed, permitted: true, background: true)
        // Still running, now on BLE alone with low power: the link keeps it, the mediums hear of it.
        #expect(moved.nearby == .unchanged)
        #expect(moved.change.mediumsChanged)
        #expect(table.nearby("s1") == .background)
        #expect(table.usage(of: alice, on: .ble) == LinkUsage(broadcasting: 1, scanning: 1, fullScanning: 0))
        #expect(table.reconcile("p1", other, permitted: true, background: true).nearby == .stopped)
        #expect(table.reconcile("s1", allowed, permitted: true, background: false).nearby == .unchanged)
        #expect(table.usage(of: alice, on: .audio) == LinkUsage(scanning: 1, fullScanning: 1))
    }

    @Test func aSubscriptionsBeaconPartFollowsItsOwnAllowInBackground() {
        var table = RunsByID()
        // Nearby devices may not run in the background; beacons may.
        let subscription = RunRequest(account: alice, manager: manager1, strategy: Strategy(mediums: [.ble], mode: .scan),
                                      beaconsAllowInBackground: true)
        let started = table.reconcile("s1", subscription, permitted: true, background: false)
        #expect(started.nearby == .started)
        #expect(started.beacons == .started)
        let background = table.reconcile("s1", subscription, permitted: true, background: true)
        #expect(background.nearby == .stopped)
        #expect(background.beacons == .unchanged)
        #expect(table.mediums(usedBy: manager1) == [.ble])
        let beaconsOnly = RunRequest(account: alice, manager: manager1, strategy: Strategy(mediums: [.ble], mode: .scan),
                                     nearby: false, beaconsAllowInBackground: false)
        let other = table.reconcile("s2", beaconsOnly, permitted: true, background: false)
        #expect(other.nearby == .unchanged)
        #expect(other.beacons == .started)
        #expect(table.end("s1").beacons == .stopped)
    }

    @Test func theTotalsAlwaysEqualWhatTheRunsSay() {
        var random = SplitMix64(seed: 0x5eed_0018)
        var table = RunsByID()
        let accounts = [alice, bob]
        let managers = [manager1, manager2]
        let mediumSets: [Set<Medium>] = [[.ble], [.audio], [.ble, .audio]]
        let placements: [Placement?] = [nil, .foreground, .background]
        for step in 0..<5_000 {
            let id = "o\(random.next() % 40)"
            let next: Run? = random.next() % 5 == 0 ? nil : run(
                accounts[Int(random.next() % 2)], managers[Int(random.next() % 2)],
                mediumSets[Int(random.next() % 3)], DiscoveryMode.allCases[Int(random.next() % 3)],
                placements[Int(random.next() % 3)], beacons: random.next() % 4 == 0)
            let before = table
            let change = table.set(id, to: next)
            #expect(table.totals == table.recomputed(), "step \(step)")
            // What the change says, against the totals before and after (each held to a recomputation).
            var wishChanged = false
            for account in accounts {
                for medium in Medium.allCases {
                    let (was, now) = (before.usage(of: account, on: medium), table.usage(of: account, on: medium))
                    wishChanged = wishChanged || (was.broadcasting > 0) != (now.broadcasting > 0)
                        || (was.scanning > 0) != (now.scanning > 0) || (was.fullScanning > 0) != (now.fullScanning > 0)
                    let started = was.scanning == 0 && now.scanning > 0
                    #expect((change.startedListening[account]?.contains(medium) ?? false) == started, "step \(step)")
                }
            }
            #expect(change.mediumsChanged == (wishChanged || before.beaconsRun(id) != table.beaconsRun(id)), "step \(step)")
            #expect(change.managers == Set(managers.filter { before.mediums(usedBy: $0) != table.mediums(usedBy: $0) }),
                    "step \(step)")
        }
    }
}
