import DBus
import Foundation
import Logging
import NearbyCore
import ServerAPI
import Testing
import TestSupport
import Upstream
@testable import NearbyDaemon

/// ``UpstreamService`` without a bus or a network: stand-in managers and
/// channels, a manual clock, and the real ``Outbox`` on a temporary SQLite
/// file behind a hand that can hold its writes. Each wait is for an event,
/// bounded by a deadline; the tests take milliseconds.
@BusActor
@Suite(.timeLimit(.minutes(1))) struct UpstreamServiceTests {
    /// What the test saw, in the order it happened: the answers to the sends
    /// and the signals of every manager, in one list.
    enum Heard: Sendable, Equatable, CustomStringConvertible {
        case answered(manager: String, messageID: String, NearbyError?)
        case verdict(manager: String, messageID: String, Outbox.Verdict)
        case received(manager: String, messageID: String)
        case connectedChanged(manager: String)

        var manager: String {
            switch self {
            case .answered(let manager, _, _), .verdict(let manager, _, _), .received(let manager, _),
                 .connectedChanged(let manager): manager
            }
        }

        var description: String {
            switch self {
            case .answered(let manager, let id, let error): "\(manager) answered \(id): \(error.map { "\($0)" } ?? "ok")"
            case .verdict(let manager, let id, let verdict): "\(manager) told \(id): \(verdict)"
            case .received(let manager, let id): "\(manager) received \(id)"
            case .connectedChanged(let manager): "\(manager) DirectChannelConnected changed"
            }
        }
    }

    /// A manager: what the service reads of it, and its signals into ``heard``.
    @BusActor
    final class Manager: UpstreamManager {
        let name: String
        let account: Account
        let appID: String
        var directChannel = false
        var background = false
        private let heard: Inbox<Heard>

        init(_ name: String, uid: UInt32 = 1000, key: String = "key", app: String = "org.example.shop", heard: Inbox<Heard>) {
            self.name = name
            account = Account(uid: uid, apiKey: key)
            appID = app
            self.heard = heard
        }

        func emitVerdict(_ messageID: String, _ verdict: Outbox.Verdict) {
            heard.put(.verdict(manager: name, messageID: messageID, verdict))
        }

        func emitMessageReceived(_ message: ChannelDownstream) {
            heard.put(.received(manager: name, messageID: message.messageId))
        }

        func directChannelConnectedChanged() {
            heard.put(.connectedChanged(manager: name))
        }
    }

    /// A direct channel the test opens, closes and speaks for.
    @BusActor
    final class Channel: UpstreamChannel {
        let account: Account
        var onOpenChanged: (Bool) -> Void = { _ in }
        var onEvent: (ChannelEvent) -> Void = { _ in }
        private(set) var isOpen = false
        /// What the service wrote while it was open.
        let written = Inbox<ChannelRequest>()

        init(account: Account) {
            self.account = account
        }

        /// As ``DirectChannel``: no longer wanted, it closes at once.
        var wanted = false {
            didSet {
                guard !wanted, isOpen else { return }
                isOpen = false
                onOpenChanged(false)
            }
        }

        func open() {
            precondition(wanted, "the service opens only a channel it wants")
            isOpen = true
            onOpenChanged(true)
        }

        func hear(_ event: ChannelEvent) {
            onEvent(event)
        }

        func send(_ request: ChannelRequest) {
            if isOpen { written.put(request) }
        }
    }

    /// The real outbox, with a hand on `add`: the add of a message id in
    /// `held` does not start its write until ``release(_:)`` (if ever).
    actor HeldOutbox: OutboxStore {
        nonisolated let outbox: Outbox
        /// The message ids whose add was called, in order.
        nonisolated let adds = Inbox<String>()
        /// The message ids each failExpired failed, once it has.
        nonisolated let expired = Inbox<[String]>()
        private var held: Set<String>
        private var waiting: [String: CheckedContinuation<Void, Never>] = [:]

        init(_ outbox: Outbox, holding held: Set<String> = []) {
            self.outbox = outbox
            self.held = held
        }

        func release(_ messageID: String) {
            held.remove(messageID)
            waiting.removeValue(forKey: messageID)?.resume()
        }

        func add(_ entry: Outbox.Entry) async throws {
            adds.put(entry.message.messageID)
            if held.contains(entry.message.messageID) {
                await withCheckedContinuation { waiting[entry.message.messageID] = $0 }
            }
            try await outbox.add(entry)
        }

        func settle(_ account: Account, appID: String, messageID: String, _ verdict: Outbox.Verdict, nowMs: UInt64,
                    told: Bool) async throws -> Outbox.Entry? {
            try await outbox.settle(account, appID: appID, messageID: messageID, verdict, nowMs: nowMs, told: told)
        }

        func keep(_ entry: Outbox.Entry, nowMs: UInt64) async throws { try await outbox.keep(entry, nowMs: nowMs) }
        func failExpired(nowMs: UInt64, sparing: Set<Account>) async throws -> [Outbox.Entry] {
            let failed = try await outbox.failExpired(nowMs: nowMs, sparing: sparing)
            expired.put(failed.map(\.message.messageID))
            return failed
        }
        func takeSettled(_ account: Account, appID: String) async throws -> [Outbox.Entry] {
            try await outbox.takeSettled(account, appID: appID)
        }
        func dropUntold(nowMs: UInt64) async throws -> Int { try await outbox.dropUntold(nowMs: nowMs) }
        func pending(_ account: Account) async throws -> [Outbox.Entry] { try await outbox.pending(account) }
        func all() async throws -> [Outbox.Entry] { try await outbox.all() }
        func nextExpiryMs(sparing: Set<Account>) async throws -> UInt64? { try await outbox.nextExpiryMs(sparing: sparing) }
    }

    /// One run of the service: its managers (the live ones), the channels it made, and what was heard.
    @BusActor
    final class Run {
        let service: UpstreamService
        let store: HeldOutbox
        let heard: Inbox<Heard>
        var live: [Manager] = []
        private let made: Made

        /// The channels the service made, in order.
        @BusActor
        final class Made {
            var channels: [Channel] = []
        }

        /// `timers`: the service's timers fire as the test moves the clock; nil: on real time (``BusTimer``).
        init(_ store: HeldOutbox, clock: ManualWallClock, timers: Timers? = nil, heard: Inbox<Heard>) {
            self.store = store
            self.heard = heard
            let made = Made()
            self.made = made
            let armTimer: ArmUpstreamTimer = if let timers {
                { delay, action in timers.arm(delay, action) }
            } else {
                { delay, action in BusTimer(after: delay, action) }
            }
            service = UpstreamService(outbox: store, clock: clock, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() },
                                      armTimer: armTimer) {
                account in
                let channel = Channel(account: account)
                made.channels.append(channel)
                return channel
            }
            service.start { [weak self] in self?.live.map { $0 } ?? [] }
        }

        var channels: [Channel] { made.channels }

        /// The channel of `account` the service wants now.
        func channel(_ account: Account) throws -> Channel {
            try #require(made.channels.last { $0.account == account && $0.wanted }, "no channel wanted for \(account)")
        }

        /// A live manager whose app heard of it (CreateManager).
        @discardableResult
        func add(_ manager: Manager) -> Manager {
            live.append(manager)
            service.managerCreated(manager)
            return manager
        }

        /// Asks for the channel of `manager`'s account, in the foreground, and opens it.
        func openChannel(for manager: Manager) throws -> Channel {
            manager.directChannel = true
            service.managersChanged(manager.account)
            let channel = try channel(manager.account)
            channel.open()
            return channel
        }

        func send(_ id: String, ttl: Int64 = 60, from manager: Manager) {
            let message = UpstreamMessage(data: ["k": id], to: "shop@nearby.example", messageID: id, ttlSeconds: ttl)
            service.send(message, from: manager) { [heard] outcome in
                switch outcome {
                case .success: heard.put(.answered(manager: manager.name, messageID: id, nil))
                case .failure(let error): heard.put(.answered(manager: manager.name, messageID: id, error))
                }
            }
        }

        /// The answer to `id`'s SendMessage, once it comes: nil when accepted.
        func answer(_ id: String, within seconds: Double = 5) async throws -> NearbyError? {
            let answer = try await heard.first(within: seconds, "the answer to \(id)") {
                if case .answered(_, id, _) = $0 { true } else { false }
            }
            if case .answered(_, _, let error) = answer { return error }
            return nil
        }

        /// The verdict `manager` hears of `id`, once it comes.
        func verdict(_ id: String, to manager: Manager, within seconds: Double = 5) async throws -> Outbox.Verdict? {
            let name = manager.name
            let told = try await heard.first(within: seconds, "\(name) told of \(id)") {
                if case .verdict(name, id, _) = $0 { true } else { false }
            }
            if case .verdict(_, _, let verdict) = told { return verdict }
            return nil
        }

        /// Everything `manager` heard so far.
        func heard(by manager: Manager) -> [Heard] {
            heard.values.filter { $0.manager == manager.name }
        }
    }

    /// The service's timers, on the manual clock: armed as the service asks,
    /// fired when ``advance(byMs:)`` brings the clock to them, or, armed
    /// already due, soon after (as a ``BusTimer`` of no delay, on the next
    /// turn of the loop).
    @BusActor
    final class Timers {
        final class Timer: UpstreamTimer {
            let dueMs: UInt64
            var action: (@BusActor () -> Void)?

            init(dueMs: UInt64, action: @escaping @BusActor () -> Void) {
                self.dueMs = dueMs
                self.action = action
            }

            func cancel() { action = nil }
        }

        let clock: ManualWallClock
        private var timers: [Timer] = []
        /// The deadline of each timer armed, in order.
        let armed = Inbox<UInt64>()
        /// The deadline of each timer fired, in order.
        private(set) var fired: [UInt64] = []

        init(clock: ManualWallClock) {
            self.clock = clock
        }

        func arm(_ delay: Duration, _ action: @escaping @BusActor () -> Void) -> any UpstreamTimer {
            let milliseconds = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
            let timer = Timer(dueMs: clock.nowMs + UInt64(max(0, milliseconds)), action: action)
            timers.append(timer)
            armed.put(timer.dueMs)
            if timer.dueMs <= clock.nowMs { Task { @BusActor in self.fire(timer) } }
            return timer
        }

        /// Moves the clock on and runs, earliest first, the actions of the timers it reached.
        func advance(byMs milliseconds: UInt64) {
            clock.advance(byMs: milliseconds)
            for timer in timers.filter({ $0.dueMs <= clock.nowMs }).sorted(by: { $0.dueMs < $1.dueMs }) { fire(timer) }
        }

        private func fire(_ timer: Timer) {
            timers.removeAll { $0 === timer }
            guard let action = timer.action else { return }
            timer.action = nil
            fired.append(timer.dueMs)
            action()
        }
    }

    let directory: URL
    let clock = ManualWallClock(nowMs: 1_800_000_000_000)
    let limits = Outbox.Limits(pendingPerApp: 3, rowsPerUser: 100, rows: 1000, retentionMs: 7 * 86_400_000)

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("upstream-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// The outbox file; each call opens it afresh, as a restarted daemon would.
    func openOutbox() throws -> Outbox {
        try UpstreamService.openOutbox(stateDirectory: directory.path, limits: limits)
    }

    /// A message of the shop as the channel carries it.
    static func wire(_ id: String, acceptedAtMs: UInt64, ttl: UInt64 = 60) -> ChannelRequest {
        .send(ChannelUpstream(app: "org.example.shop", messageId: id, to: "shop@nearby.example", data: ["k": id],
                              expiresAtMs: acceptedAtMs + ttl * 1000))
    }

    // MARK: SendMessage

    @Test func aMessageIsAnsweredOnceItIsOnDiskAndARefusalWithItsNamedError() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = HeldOutbox(try openOutbox(), holding: ["m1"])
        let run = Run(store, clock: clock, heard: Inbox())
        let shop = run.add(Manager("shop", heard: run.heard))

        run.send("m1", from: shop)
        _ = try await store.adds.first(within: 5, "the outbox asked to add m1") { $0 == "m1" }
        // The write is held: the call is not answered, and nothing is on disk.
        #expect(run.heard.values.isEmpty)
        #expect(try await store.outbox.all().isEmpty)
        await store.release("m1")
        #expect(try await run.answer("m1") == nil)
        // Answered: it is on disk, and a daemon opened now finds it.
        #expect(try await openOutbox().all().map(\.message.messageID) == ["m1"])

        // The outbox's refusals are the named errors of the D-Bus API.
        run.heard.clear()
        run.send("m1", from: shop)
        #expect(try await run.answer("m1") == .invalidArguments("this message_id is already pending for an app of this API key"))
        run.heard.clear()
        run.send("m2", from: shop)
        run.send("m3", from: shop)
        run.send("m4", from: shop)
        #expect(try await run.answer("m2") == nil)
        #expect(try await run.answer("m3") == nil)
        #expect(try await run.answer("m4") == .limitExceeded("this app has 3 upstream messages pending already ([upstream] max-pending)"))
        // A message against CCS's rules never reaches the outbox.
        run.send("", from: shop)
        #expect(try await run.answer("")
                == .invalidArguments("message_id must be 1 to \(CCSRules.maximumIDBytes) bytes without control characters"))
        await run.service.stop()
        #expect(store.adds.values == ["m1", "m1", "m2", "m3", "m4"])
    }

    /// SendFailed of a TTL-0 message without a channel.
    static let noChannel = Outbox.Failure(error: "SERVICE_NOT_AVAILABLE",
                                          description: "no direct channel to the connection server, and the TTL is 0")

    @Test func aTTLOfZeroWithoutAChannelFailsAtOnceAfterTheAnswer() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = HeldOutbox(try openOutbox())
        let run = Run(store, clock: clock, heard: Inbox())
        let shop = run.add(Manager("shop", heard: run.heard))

        run.send("now", ttl: 0, from: shop)
        // Before send returns, without the disk: the answer, then SendFailed.
        #expect(run.heard.values == [.answered(manager: "shop", messageID: "now", nil),
                                     .verdict(manager: "shop", messageID: "now", .failed(Self.noChannel))])
        // With the channel open, it goes to the server like any other.
        let channel = try run.openChannel(for: shop)
        run.send("now", ttl: 0, from: shop)
        let acceptedAt = clock.nowMs
        let written = try await channel.written.first(within: 5, "the message on the channel") { _ in true }
        #expect(written == Self.wire("now", acceptedAtMs: acceptedAt, ttl: 0))
        await run.service.stop()
        #expect(store.adds.values == ["now"])
        #expect(run.heard(by: shop).filter { if case .verdict = $0 { true } else { false } }.count == 1)
    }

    // MARK: The direct channels

    @Test func theChannelIsWantedWhileAManagerInTheForegroundAsksForIt() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = Run(HeldOutbox(try openOutbox()), clock: clock, heard: Inbox())
        let shop = run.add(Manager("shop", heard: run.heard))
        let game = run.add(Manager("game", app: "org.example.game", heard: run.heard))
        let stranger = run.add(Manager("stranger", uid: 1001, heard: run.heard))
        let account = shop.account

        run.service.managersChanged(account)
        #expect(run.channels.isEmpty)
        // Asked for in the background: the wish waits.
        shop.directChannel = true
        shop.background = true
        run.service.managersChanged(account)
        #expect(run.channels.isEmpty)
        shop.background = false
        run.service.managersChanged(account)
        let first = try run.channel(account)
        #expect(run.channels.count == 1 && !run.service.isChannelOpen(account))

        // A message accepted while it connects goes when it opens; the account's managers hear it open.
        run.send("m1", from: shop)
        #expect(try await run.answer("m1") == nil)
        let acceptedAt = clock.nowMs
        first.open()
        #expect(run.service.isChannelOpen(account))
        let written = try await first.written.first(within: 5, "the pending message") { _ in true }
        #expect(written == Self.wire("m1", acceptedAtMs: acceptedAt))
        #expect(run.heard(by: shop).last == .connectedChanged(manager: "shop"))
        #expect(run.heard(by: game) == [.connectedChanged(manager: "game")])

        // Another user's key has its own channel, and hears nothing of this one.
        stranger.directChannel = true
        run.service.managersChanged(stranger.account)
        let strangers = try run.channel(stranger.account)
        #expect(run.channels.count == 2 && first.wanted)

        // The one manager that wants it goes to the background: it closes at once.
        shop.background = true
        run.service.managersChanged(account)
        #expect(!first.wanted && !run.service.isChannelOpen(account))
        #expect(run.heard(by: game) == [.connectedChanged(manager: "game"), .connectedChanged(manager: "game")])
        #expect(strangers.wanted && run.heard(by: stranger).isEmpty)
        // Another manager of the account asks: a new channel.
        game.directChannel = true
        run.service.managersChanged(account)
        #expect(run.channels.count == 3)
        #expect(try run.channel(account) !== first)
        await run.service.stop()
        #expect(run.channels.allSatisfy { !$0.wanted })
    }

    // MARK: Verdicts

    @Test func aVerdictGoesToEveryManagerOfTheAppAndToNoOtherUsersApp() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = HeldOutbox(try openOutbox())
        let run = Run(store, clock: clock, heard: Inbox())
        let shop = run.add(Manager("shop", heard: run.heard))
        let shop2 = run.add(Manager("shop2", heard: run.heard))
        let game = run.add(Manager("game", app: "org.example.game", heard: run.heard))
        // Another user's app with the same key and id: another app.
        let stranger = run.add(Manager("stranger", uid: 1001, heard: run.heard))
        let channel = try run.openChannel(for: shop)
        _ = try run.openChannel(for: stranger)
        run.send("m1", from: shop)
        run.send("m2", from: shop2)
        run.send("m1", from: stranger)
        _ = try await run.heard.nth(3, within: 5, "three answers") { if case .answered = $0 { true } else { false } }
        #expect(run.heard.values.allSatisfy { if case .answered(_, _, .some) = $0 { false } else { true } })

        let failure = Outbox.Failure(error: "INVALID_JSON", description: "the application server refused it")
        channel.hear(.sent([ChannelMessageRef(app: shop.appID, messageId: "m1")]))
        channel.hear(.failed(ChannelFailure(app: shop.appID, messageId: "m2", error: failure.error, description: failure.description)))
        for manager in [shop, shop2] {
            #expect(try await run.verdict("m1", to: manager) == .succeeded)
            #expect(try await run.verdict("m2", to: manager) == .failed(failure))
        }
        // Downstream: every manager of the account hears it, then the server has its acknowledgement.
        channel.hear(.message(ChannelDownstream(messageId: "d1", from: "shop@nearby.example", data: ["a": "b"])))
        #expect(run.heard.values.filter { if case .received = $0 { true } else { false } }.map(\.manager) == ["shop", "shop2", "game"])
        #expect(try await channel.written.first(within: 5, "the acknowledgement") { $0 == .ack(messageId: "d1") } == .ack(messageId: "d1"))

        await run.service.stop()
        let verdicts = run.heard.values.filter { if case .verdict = $0 { true } else { false } }
        #expect(verdicts.map(\.manager).sorted() == ["shop", "shop", "shop2", "shop2"])
        // Hears its account's channel open, the downstream message, and the channel close at the stop; no verdict.
        #expect(run.heard(by: game) == [.connectedChanged(manager: "game"), .received(manager: "game", messageID: "d1"),
                                        .connectedChanged(manager: "game")])
        // The stranger's m1 waits for its own channel's verdict; the shop's were told and are gone.
        #expect(try await store.outbox.all().map(\.account) == [stranger.account])
    }

    @Test func verdictsOfAnEarlierRunReachTheAppWhenItComesBackAndWaitWhileItHasNone() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        // The first run: the shop sends three messages and quits; two verdicts come while it is away.
        let first = Run(HeldOutbox(try openOutbox()), clock: clock, heard: Inbox())
        let shop = first.add(Manager("shop", heard: first.heard))
        let keeper = first.add(Manager("keeper", app: "org.example.game", heard: first.heard))
        let channel = try first.openChannel(for: keeper)
        for id in ["m1", "m2", "m3"] { first.send(id, from: shop) }
        for id in ["m1", "m2", "m3"] { #expect(try await first.answer(id) == nil) }
        first.live.removeAll { $0 === shop }
        let failure = Outbox.Failure(error: "INVALID_JSON", description: "the application server refused it")
        channel.hear(.sent([ChannelMessageRef(app: shop.appID, messageId: "m1")]))
        channel.hear(.failed(ChannelFailure(app: shop.appID, messageId: "m2", error: failure.error, description: failure.description)))
        await first.service.stop()
        #expect(first.heard(by: shop).allSatisfy { if case .verdict = $0 { false } else { true } })
        let kept = try await openOutbox().all()
        #expect(kept.map(\.message.messageID) == ["m1", "m2", "m3"])
        #expect(kept.map(\.verdict) == [.succeeded, .failed(failure), nil])

        // The restarted daemon, past m3's TTL and without a channel: m3 fails here, and waits too.
        clock.advance(byMs: 61_000)
        let store = HeldOutbox(try openOutbox())
        let second = Run(store, clock: clock, heard: Inbox())
        #expect(try await store.expired.first(within: 5, "m3 expired") { !$0.isEmpty } == ["m3"])
        let expired = Outbox.Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of 60 s")
        #expect(try await store.outbox.all().map(\.verdict) == [.succeeded, .failed(failure), .failed(expired)])

        // Other apps come first: another user's of the same id, the same user's game. Then the shop, twice.
        let stranger = second.add(Manager("stranger", uid: 1001, heard: second.heard))
        let game = second.add(Manager("game", app: "org.example.game", heard: second.heard))
        let shopAgain = Manager("shop", heard: second.heard)
        let shopToo = Manager("shop too", heard: second.heard)
        second.live.append(shopToo)
        second.add(shopAgain)
        for manager in [shopAgain, shopToo] {
            #expect(try await second.verdict("m3", to: manager) == .failed(expired))
        }
        await second.service.stop()
        for manager in [shopAgain, shopToo] {
            #expect(second.heard(by: manager) == [
                .verdict(manager: manager.name, messageID: "m1", .succeeded),
                .verdict(manager: manager.name, messageID: "m2", .failed(failure)),
                .verdict(manager: manager.name, messageID: "m3", .failed(expired)),
            ])
        }
        #expect(second.heard(by: stranger).isEmpty && second.heard(by: game).isEmpty)
        #expect(try await store.outbox.all().isEmpty)
    }

    /// The outbox's write of one message never ends: the other apps' calls
    /// are answered and their verdicts told all the same, and only the
    /// stuck app's later messages wait, in order.
    @Test func aWriteThatNeverEndsHoldsUpNoOtherAppsSendsOrVerdicts() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = HeldOutbox(try openOutbox(), holding: ["stuck"])
        let run = Run(store, clock: clock, heard: Inbox())
        let shop = run.add(Manager("shop", heard: run.heard))
        let game = run.add(Manager("game", app: "org.example.game", heard: run.heard))
        let stranger = run.add(Manager("stranger", uid: 1001, heard: run.heard))
        let channel = try run.openChannel(for: shop)
        let strangers = try run.openChannel(for: stranger)

        run.send("stuck", from: shop)
        _ = try await store.adds.first(within: 5, "the stuck write") { $0 == "stuck" }
        run.send("after", from: shop)
        run.send("g1", from: game)
        run.send("s1", from: stranger)
        #expect(try await run.answer("g1") == nil)
        #expect(try await run.answer("s1") == nil)
        let failure = Outbox.Failure(error: "INVALID_JSON", description: "the application server refused it")
        channel.hear(.sent([ChannelMessageRef(app: game.appID, messageId: "g1")]))
        strangers.hear(.failed(ChannelFailure(app: stranger.appID, messageId: "s1", error: failure.error,
                                              description: failure.description)))
        #expect(try await run.verdict("g1", to: game) == .succeeded)
        #expect(try await run.verdict("s1", to: stranger) == .failed(failure))
        // The shop's next message waits its turn: not even written yet.
        #expect(run.heard(by: shop).allSatisfy { if case .answered = $0 { false } else { true } })
        #expect(!store.adds.values.contains("after"))

        await store.release("stuck")
        #expect(try await run.answer("after") == nil)
        await run.service.stop()
        #expect(run.heard(by: shop).compactMap { if case .answered(_, let id, .none) = $0 { id } else { nil } } == ["stuck", "after"])
    }

    /// A TTL that runs out while the daemon runs, with no channel to take the
    /// message: the service's timer, armed for the earliest TTL, fails it
    /// (`TTL_EXCEEDED`) when the clock reaches it and not a millisecond
    /// before, tells the app, and is armed again for the next.
    @Test func aTTLRunningOutMidRunFailsTheMessageOnTimeAndArmsForTheNext() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let timers = Timers(clock: clock)
        let store = HeldOutbox(try openOutbox())
        let run = Run(store, clock: clock, timers: timers, heard: Inbox())
        let shop = run.add(Manager("shop", heard: run.heard))
        let start = clock.nowMs
        run.send("short", ttl: 60, from: shop)
        #expect(try await run.answer("short") == nil)
        run.send("long", ttl: 600, from: shop)
        #expect(try await run.answer("long") == nil)
        // Each write arms the timer again for the earliest TTL: short's.
        _ = try await timers.armed.first(within: 5, "the timer armed for short's TTL") { $0 == start + 60_000 }

        timers.advance(byMs: 59_999)
        #expect(timers.fired.isEmpty, "nothing is due a millisecond before short's TTL")
        timers.advance(byMs: 1)
        let expired = Outbox.Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of 60 s")
        #expect(try await run.verdict("short", to: shop) == .failed(expired))
        _ = try await timers.armed.first(within: 5, "the timer armed again for long's TTL") { $0 == start + 600_000 }
        await run.service.stop()
        #expect(run.heard(by: shop).filter { if case .verdict = $0 { true } else { false } } == [
            .verdict(manager: "shop", messageID: "short", .failed(expired)),
        ])
        // Told and gone; long waits for a channel or its own TTL.
        #expect(try await store.outbox.all().map(\.message.messageID) == ["long"])
    }
}
