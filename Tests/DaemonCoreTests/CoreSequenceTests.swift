@_spi(Testing) import DaemonCore
import Foundation
import Logging
import NearbyBusContract
import NearbyCore
import ServerAPI
import Testing

/// The core under thousands of seeded commands from several clients, with
/// the world around it played by what its effects say: links opened and
/// retired, objects ended, the TTL timer. After every command the effects
/// must make sense to that world (nothing sent to a link that is not open,
/// nothing ended twice or before it was made) and the core's state must
/// agree with itself (a link per account in use, each object running as the
/// one rule says, a waiting object inactive).
struct CoreSequenceTests {
    /// The world as the effects built it.
    private struct World {
        var openLinks: Set<Account> = []
        /// The link each account's opening gave: commands go to it alone.
        var opened: [Account: Link] = [:]
        /// What each link was told to keep on the server.
        var held: [Account: Set<String>] = [:]
        var objects: Set<String> = []
        var ended: Set<String> = []
        var managers: Set<ObjectIdentifier> = []
        var tickAt: UInt64?
        var problems: [String] = []

        mutating func take(_ effects: [Effect], after command: String) {
            for effect in effects {
                switch effect {
                case .openLink(let link):
                    if !openLinks.insert(link.account).inserted { problems.append("\(command): opened an open link") }
                    opened[link.account] = link
                case .retireLink(let link):
                    let account = link.account
                    if openLinks.remove(account) == nil { problems.append("\(command): retired a link not open") }
                    if opened.removeValue(forKey: account) !== link { problems.append("\(command): retired another link") }
                    // It drains what it was told, then stops: the server must have heard of every end.
                    if let kept = held.removeValue(forKey: account), !kept.isEmpty {
                        problems.append("\(command): retired a link that still keeps \(kept.sorted()) on the server")
                    }
                case .link(let link, let linkCommand):
                    let account = link.account
                    if !openLinks.contains(account) { problems.append("\(command): \(linkCommand) to a link not open") }
                    if opened[account] !== link { problems.append("\(command): \(linkCommand) to another link than the one opened") }
                    switch linkCommand {
                    case .publish(let publication): held[account, default: []].insert(publication.id)
                    case .subscribe(let subscription): held[account, default: []].insert(subscription.id)
                    case .unpublish(let id), .unsubscribe(let id): held[account]?.remove(id)
                    case .seen, .gone: break
                    }
                case .ended(let object):
                    let id = object.id
                    if objects.remove(id) == nil { problems.append("\(command): ended \(id), which is not live") }
                    if held.values.contains(where: { $0.contains(id) }) {
                        problems.append("\(command): \(id) ended while the server was still to keep it")
                    }
                    ended.insert(id)
                case .expired(let object), .objectChanged(let object, _):
                    if !objects.contains(object.id) { problems.append("\(command): \(effect) of \(object.id), which is not live") }
                case .managerEnded(let manager):
                    if managers.remove(ObjectIdentifier(manager)) == nil { problems.append("\(command): a manager ended twice") }
                case .managerChanged(let manager, _):
                    if !managers.contains(ObjectIdentifier(manager)) { problems.append("\(command): a gone manager changed") }
                case .found(.found(let id, _, _, _)), .found(.lost(let id, _, _, _)):
                    if !objects.contains(id) { problems.append("\(command): found or lost of \(id), which is not live") }
                case .tickAt(let ms):
                    tickAt = ms
                case .daemonChanged, .mediumsChanged, .watchBeacons, .unwatchBeacons:
                    break
                }
            }
        }
    }

    @Test func aLongSeededRunOfEveryCommandKeepsTheCoreAndItsEffectsConsistent() throws {
        var random = SplitMix64(seed: 0x5eed_c0de)
        let clock = ManualWallClock(nowMs: 1_800_000_000_000)
        final class Decisions { var granted: Set<String> = [] }
        let decisions = Decisions()
        let core = Core(registry: Registry(limits: RegistryLimits(), idPrefix: "seq"), enabledMediums: [.ble, .audio],
                        serverURLs: ["https://a"], refusedRetry: "30 s",
                        sightings: SightingTracker(lostTimeout: .seconds(5), refreshInterval: .seconds(2)),
                        clock: clock, logger: Logger(label: "core-sequence")) { decisions.granted.contains($0.appId) }
        var world = World()
        let busNames = [":1.1", ":1.2", ":1.3", ":1.4"]
        let apps = ["a", "b", "c"]
        let conditions: [MediumCondition] = [.ready, .unavailable, .refused]
        let start = ContinuousClock.now
        var elapsed = Duration.zero
        // Sorted: a dictionary's order differs from run to run, the seed's choices must not.
        var live: [Manager] { core.managers.values.sorted { $0.path < $1.path } }

        for step in 0..<4_000 {
            let command: String
            let effects: [Effect]
            switch random.next() % 14 {
            case 0, 1:
                let busName = busNames.randomElement(using: &random)!
                command = "add manager of \(busName)"
                let client = try core.registry.addClient(busName: busName, uid: busName == ":1.4" ? 1001 : 1000)
                let made = try? core.addManager(to: client, apiKey: ["k1", "k2"].randomElement(using: &random)!,
                                                appId: apps.randomElement(using: &random)!, debugLogging: false)
                if let made { world.managers.insert(ObjectIdentifier(made.0)) }
                effects = made?.1 ?? []
            case 2, 3:
                guard let manager = live.randomElement(using: &random) else { continue }
                command = "publish"
                let strategy = Strategy(mediums: [[.ble], [.audio], [.ble, .audio]].randomElement(using: &random)!,
                                        mode: DiscoveryMode.allCases.randomElement(using: &random)!,
                                        ttlSeconds: UInt32.random(in: 1...30, using: &random),
                                        allowInBackground: Bool.random(using: &random))
                guard let (publication, made) = try? core.publish(Message(namespace: "n", type: "t", content: [1]),
                                                                  strategy: strategy, in: manager) else { continue }
                world.objects.insert(publication.id)
                effects = made
            case 4, 5:
                guard let manager = live.randomElement(using: &random) else { continue }
                command = "subscribe"
                let beacons = random.next() % 3 == 0
                    ? BeaconStrategy(allowInBackground: Bool.random(using: &random)) : nil
                let deviceTypes = DeviceTypes(nearby: beacons == nil || Bool.random(using: &random), beacons: beacons)
                let strategy = Strategy(mediums: [.ble, .audio], ttlSeconds: UInt32.random(in: 0...30, using: &random),
                                        allowInBackground: Bool.random(using: &random))
                guard let (subscription, made) = try? core.subscribe(MessageFilter(), strategy: strategy, deviceTypes: deviceTypes,
                                                                     in: manager) else { continue }
                world.objects.insert(subscription.id)
                effects = made
            case 6:
                guard let id = world.objects.sorted().randomElement(using: &random) else { continue }
                command = "end \(id)"
                if let publication = core.publications[id] {
                    effects = core.end(publication)
                } else if let subscription = core.subscriptions[id] {
                    effects = core.end(subscription)
                } else {
                    Issue.record("\(id) is live in the model, not in the core")
                    continue
                }
            case 7:
                if Bool.random(using: &random) {
                    guard let manager = live.randomElement(using: &random) else { continue }
                    command = "release"
                    effects = core.release(manager)
                } else {
                    let busName = busNames.randomElement(using: &random)!
                    command = "\(busName) left"
                    effects = core.clientLeft(busName)
                }
            case 8:
                let app = apps.randomElement(using: &random)!
                if !decisions.granted.insert(app).inserted { decisions.granted.remove(app) }
                command = "decision of \(app)"
                effects = core.permissionChanged(uid: 1000, appId: app) + core.permissionChanged(uid: 1001, appId: app)
            case 9:
                guard let manager = live.randomElement(using: &random) else { continue }
                command = "background"
                effects = core.setBackground(manager, requested: Bool.random(using: &random))
            case 10:
                let busName = busNames.randomElement(using: &random)!
                command = "session of \(busName)"
                effects = core.session(of: busName, away: Bool.random(using: &random))
            case 11:
                guard let account = world.openLinks.sorted(by: { $0.description < $1.description }).randomElement(using: &random) else { continue }
                let ids = world.objects.sorted()
                let event: LinkEvent = switch random.next() % 5 {
                case 0: .connected(namespace: "p", registered: Set(ids.filter { _ in Bool.random(using: &random) }), server: "https://a")
                case 1: .disconnected
                case 2: .waiting("refused", reached: false)
                case 3: .registered(ids.randomElement(using: &random) ?? "none")
                default: .token(Token(bytes: (0..<Token.byteCount).map { _ in UInt8.random(in: 0...255, using: &random) }))
                }
                command = "link event \(event)"
                effects = core.link(account, event)
            case 12:
                clock.advance(byMs: UInt64.random(in: 0...8_000, using: &random))
                command = "tick"
                effects = core.tick()
            default:
                let medium = Medium.allCases.randomElement(using: &random)!
                command = "medium"
                elapsed += .seconds(1)
                let token = Token(bytes: [UInt8](repeating: UInt8(random.next() % 4), count: Token.byteCount))!
                effects = core.medium(medium, is: conditions.randomElement(using: &random)!)
                    + core.heard(Sighting(token: token, medium: medium, rssi: -60, txPower: -59, distanceMeters: 1,
                                          seenAtMilliseconds: clock.nowMs), at: start + elapsed)
                    + core.expireSightings(at: start + elapsed)
            }
            world.take(effects, after: "step \(step), \(command)")

            // The core's state agrees with itself and with the world.
            let accounts = Set(core.managers.values.map(\.account))
            #expect(Set(core.links.keys) == accounts, "step \(step), \(command): a link per account in use")
            #expect(world.openLinks == accounts, "step \(step), \(command): the links open are the accounts in use")
            #expect(Set(core.publications.keys).union(core.subscriptions.keys) == world.objects,
                    "step \(step), \(command): the live objects")
            #expect(core.registry.objectCount == world.objects.count)
            for publication in core.publications.values {
                #expect(core.managers[ObjectIdentifier(publication.manager)] != nil, "an object's manager lives")
                let state = publication.manager.state
                let placement = Placement.of(permitted: core.isPermitted(publication.manager), background: state.background,
                                             allowInBackground: publication.strategy.allowInBackground)
                #expect(publication.run?.nearby == placement, "step \(step), \(command): the run rule")
                #expect((publication.status == .inactive) == (placement == nil), "step \(step), \(command): inactive iff waiting")
            }
            for subscription in core.subscriptions.values {
                let running = subscription.run?.nearby != nil || subscription.run?.beacons == true
                #expect((subscription.status == .inactive) == !running, "step \(step), \(command): inactive iff waiting")
            }
            let runs = core.publications.values.compactMap(\.run) + core.subscriptions.values.compactMap(\.run)
            #expect(core.runs.totals == RunTable.recomputed(from: runs), "step \(step), \(command): the totals are the objects' runs")
            if let deadline = world.tickAt, let next = core.publications.values.map(\.expiresAtMs).min(), deadline > next {
                Issue.record("step \(step), \(command): the timer at \(deadline) comes after a TTL at \(next)")
            }
            guard world.problems.isEmpty else { break }
        }
        #expect(world.problems.isEmpty, "\(world.problems)")
        #expect(world.ended.count > 200, "the run ended enough objects to mean something: \(world.ended.count)")
    }
}
