import DBus
import Foundation
import Logging
import NearbyCore
import ServerAPI
import Upstream

/// Upstream and downstream messages on the device's side.
///
/// `SendMessage` checks a message and puts it in the durable outbox, where it
/// stays until it has a verdict and its app has been told. The direct channel
/// of its ``Account`` (one per user and API key, open while some manager of
/// the account has `DirectChannel` set and is in the foreground) carries it:
/// every pending message of the account when the channel opens, in the order
/// they were accepted, and each new one at once. The server answers `sent`
/// (the application server acknowledged it: `SendSucceeded`) or `failed`
/// (`SendFailed`); each goes to the sending app's live managers or, when the
/// app has none (it quit, nearbyd restarted), waits in the outbox for its next
/// manager, for `[upstream] verdict-retention-days` at most. While an
/// account's channel is open the server judges its messages' TTLs; otherwise
/// a message whose TTL runs out fails here with `TTL_EXCEEDED`, and one with
/// TTL 0 fails at once with `SERVICE_NOT_AVAILABLE`.
///
/// Downstream messages go to every live manager of the account
/// (`MessageReceived`) and are then acknowledged; the server repeats a
/// message until it has the acknowledgement, so an app may see one again
/// after a reconnect.
///
/// The outbox is read and written off the bus thread, one job at a time in
/// the order asked within a lane (``SerialJobs``): each app's messages and
/// verdicts in its own lane, and what spans the apps (the TTLs, the
/// retention, the pending messages when a channel opens) in one more. So
/// `SendMessage` is answered once its message is on disk, a message accepted
/// before another of its app is sent before it, and an app whose write is
/// slow (or never ends) holds up no other app's messages and verdicts.
///
/// It knows nothing of D-Bus calls: the bus face (``ManagerObject``'s
/// `Upstream1`) reads the call, hands the message over, and answers the call
/// when told. Its managers, channels and outbox are the protocols of
/// UpstreamParts.swift, so the logic is tested with stand-ins and a manual clock.
@BusActor
final class UpstreamService {
    /// How `SendMessage` ends: accepted (on disk), or refused with a named error.
    typealias Answer = @BusActor @Sendable (Result<Void, NearbyError>) -> Void

    private let outbox: any OutboxStore
    private let logger: Logger
    /// Makes the channel of an account.
    private let makeChannel: @BusActor (Account) -> any UpstreamChannel
    /// Every live manager, for the signals and the channels' wishes.
    private var liveManagers: @BusActor () -> [any UpstreamManager] = { [] }
    /// The channels wanted now.
    private var channels: [Account: any UpstreamChannel] = [:]
    private let jobs = SerialJobs<Lane>()
    /// When messages are accepted, expire and are settled.
    private let clock: any WallClock
    /// Arms the timers, on the same time as ``clock``.
    private let armTimer: ArmUpstreamTimer
    private var expiryTimer: (any UpstreamTimer)?
    private var retentionTimer: (any UpstreamTimer)?

    init(outbox: any OutboxStore, clock: any WallClock, logger: Logger,
         armTimer: @escaping ArmUpstreamTimer = { delay, action in BusTimer(after: delay, action) },
         makeChannel: @escaping @BusActor (Account) -> any UpstreamChannel) {
        self.outbox = outbox
        self.clock = clock
        self.armTimer = armTimer
        self.logger = logger
        self.makeChannel = makeChannel
    }

    /// Opens the outbox in `stateDirectory` (`outbox.sqlite`).
    static func openOutbox(stateDirectory: String, limits: Outbox.Limits) throws -> Outbox {
        try Outbox(path: (stateDirectory as NSString).appendingPathComponent("outbox.sqlite"), limits: limits)
    }

    /// Picks up what an earlier run left pending; `managers` lists the live
    /// managers whenever a message is settled or a channel's wish may change.
    func start(managers: @escaping @BusActor () -> [any UpstreamManager]) {
        liveManagers = managers
        jobs.add(.shared) { [self] in
            do {
                let kept = try await outbox.all()
                if !kept.isEmpty { logger.info("upstream messages kept from before", metadata: ["count": "\(kept.count)"]) }
            } catch {
                logger.error("cannot read the upstream outbox: \(error)")
            }
        }
        dropUntoldVerdicts()
        armExpiry()
    }

    /// Closes every channel; the outbox's work in hand is finished.
    func stop() async {
        for channel in channels.values { channel.wanted = false }
        channels.removeAll()
        await jobs.finish()
        // After the jobs: the last of them may have armed a timer again.
        expiryTimer?.cancel()
        retentionTimer?.cancel()
    }

    /// `SendMessage` from `manager`'s owner. `answer` hears once how it ends:
    /// at once when the message is refused or fails on the spot (before its
    /// `SendFailed`), otherwise once the message is on disk or the outbox
    /// refused it.
    func send(_ message: UpstreamMessage, from manager: any UpstreamManager, answer: @escaping Answer) {
        do throws(NearbyError) {
            try message.validate()
        } catch {
            return answer(.failure(error))
        }
        let account = manager.account
        guard message.ttlSeconds > 0 || isChannelOpen(account) else {
            // Now or never, and there is no channel: failed once the call has answered.
            answer(.success(()))
            manager.emitVerdict(message.messageID, .failed(Outbox.Failure(
                error: "SERVICE_NOT_AVAILABLE", description: "no direct channel to the connection server, and the TTL is 0")))
            return
        }
        let entry = Outbox.Entry(account: account, appID: manager.appID, message: message, acceptedAtMs: clock.nowMs)
        jobs.add(.app(AppKey(account: account, appID: entry.appID))) { [self] in
            do {
                try await outbox.add(entry)
            } catch {
                return answer(.failure(Self.refusal(error, logger: logger)))
            }
            answer(.success(()))
            logger.debug("upstream message accepted", metadata: ["app": "\(entry.appID)", "message": "\(message.messageID)",
                                                                 "ttl": "\(message.ttlSeconds)", "account": "\(account)"])
            if let channel = channels[account], channel.isOpen {
                channel.send(.send(Self.wire(entry)))
            } else {
                armExpiry()
            }
        }
    }

    private static func refusal(_ error: any Error, logger: Logger) -> NearbyError {
        switch error {
        case Outbox.Refusal.duplicateID:
            return .invalidArguments("this message_id is already pending for an app of this API key")
        case Outbox.Refusal.appFull(let limit):
            return .limitExceeded("this app has \(limit) upstream messages pending already ([upstream] max-pending)")
        case Outbox.Refusal.userFull(let limit):
            return .limitExceeded("this user's apps keep \(limit) upstream messages and verdicts already ([upstream] max-per-user)")
        case Outbox.Refusal.full(let limit):
            return .limitExceeded("the outbox holds \(limit) upstream messages and verdicts already ([upstream] max-total)")
        default:
            logger.error("cannot write the upstream outbox: \(error)")
            return .failed("the outbox cannot take the message: \(error)")
        }
    }

    // MARK: The direct channels

    /// Whether the channel of `account` is open: `DirectChannelConnected` of its managers.
    func isChannelOpen(_ account: Account) -> Bool {
        channels[account]?.isOpen ?? false
    }

    /// Opens or closes the channel of `account` as its managers now want: it
    /// is wanted while one of them has `DirectChannel` set and is not in the
    /// background. Called whenever one of those may have changed.
    func managersChanged(_ account: Account) {
        let wishes = liveManagers().filter { $0.account == account }
            .map { manager -> (directChannel: Bool, background: Bool) in (manager.directChannel, manager.background) }
        let wanted = Self.wantsChannel(wishes)
        if wanted, channels[account] == nil {
            let channel = makeChannel(account)
            channel.onOpenChanged = { [weak self] open in self?.channel(account, isOpen: open) }
            channel.onEvent = { [weak self, weak channel] event in
                guard let self, let channel else { return }
                self.handle(event, on: channel)
            }
            channels[account] = channel
            channel.wanted = true
        } else if !wanted, let channel = channels.removeValue(forKey: account) {
            channel.wanted = false
        }
    }

    /// An account's channel is wanted while one of its managers has
    /// `DirectChannel` set and is in the foreground.
    nonisolated static func wantsChannel(_ managers: some Sequence<(directChannel: Bool, background: Bool)>) -> Bool {
        managers.contains { $0.directChannel && !$0.background }
    }

    private func channel(_ account: Account, isOpen: Bool) {
        for manager in liveManagers() where manager.account == account { manager.directChannelConnectedChanged() }
        if isOpen, let channel = channels[account] {
            // In the shared lane, after any expiry under way: what it failed is not sent.
            jobs.add(.shared) { [self] in
                // It may have closed (or another opened) while the jobs before this ran.
                guard channels[account] === channel, channel.isOpen else { return }
                do {
                    let pending = try await outbox.pending(account)
                    logger.debug("sending the pending upstream messages", metadata: ["count": "\(pending.count)"])
                    for entry in pending { channel.send(.send(Self.wire(entry))) }
                } catch {
                    logger.error("cannot read the upstream outbox: \(error)")
                }
            }
        }
        // Open, the server judges the account's TTLs; closed, they run out here again.
        armExpiry()
    }

    private func handle(_ event: ChannelEvent, on channel: any UpstreamChannel) {
        switch event {
        case .sent(let refs):
            for ref in refs { settle(channel.account, ref.app, ref.messageId, .succeeded) }
        case .failed(let failure):
            settle(channel.account, failure.app, failure.messageId,
                   .failed(Outbox.Failure(error: failure.error, description: failure.description)))
        case .message(let message):
            let managers = liveManagers().filter { $0.account == channel.account }
            logger.debug("downstream message", metadata: ["message": "\(message.messageId)", "from": "\(message.from)",
                                                          "managers": "\(managers.count)"])
            for manager in managers { manager.emitMessageReceived(message) }
            channel.send(.ack(messageId: message.messageId))
        }
    }

    private func settle(_ account: Account, _ appID: String, _ messageID: String, _ verdict: Outbox.Verdict) {
        jobs.add(.app(AppKey(account: account, appID: appID))) { [self] in
            // With the app here it is told at once, in one transaction; otherwise kept for its next manager.
            let appIsHere = !managers(account, appID).isEmpty
            do {
                // A verdict for a message settled already (repeated after a reconnect) is dropped.
                guard let entry = try await outbox.settle(account, appID: appID, messageID: messageID, verdict, nowMs: clock.nowMs,
                                                          told: appIsHere) else { return }
                let managers = managers(account, appID)
                if appIsHere, managers.isEmpty {
                    // The app left while the verdict was written: it waits for the next manager after all.
                    try await outbox.keep(entry, nowMs: clock.nowMs)
                    return
                }
                tell(entry, verdict, to: managers)
            } catch {
                logger.error("cannot write the upstream outbox: \(error)")
            }
        }
    }

    // MARK: TTLs and retention

    /// A timer for the next TTL to run out, outside the accounts whose channel is open.
    private func armExpiry() {
        jobs.add(.shared) { [self] in
            expiryTimer?.cancel()
            expiryTimer = nil
            let next: UInt64?
            do {
                next = try await outbox.nextExpiryMs(sparing: openAccounts)
            } catch {
                return logger.error("cannot read the upstream outbox: \(error)")
            }
            guard let next else { return }
            let delay = Duration.milliseconds(Int64(clamping: next) - Int64(clamping: clock.nowMs))
            expiryTimer = armTimer(max(delay, .zero)) { [weak self] in self?.expire() }
        }
    }

    private var openAccounts: Set<Account> {
        Set(channels.values.filter { $0.isOpen }.map { $0.account })
    }

    private func expire() {
        jobs.add(.shared) { [self] in
            do {
                let failed = try await outbox.failExpired(nowMs: clock.nowMs, sparing: openAccounts)
                for entry in failed {
                    logger.info("upstream message expired", metadata: ["app": "\(entry.appID)", "message": "\(entry.message.messageID)"])
                }
                var apps: Set<AppKey> = []
                for entry in failed where apps.insert(AppKey(account: entry.account, appID: entry.appID)).inserted {
                    tellVerdicts(entry.account, appID: entry.appID)
                }
            } catch {
                logger.error("cannot write the upstream outbox: \(error)")
            }
        }
        armExpiry()
    }

    /// Verdicts no app came back for within `[upstream] verdict-retention-days`
    /// go; looked for at start and every hour.
    private func dropUntoldVerdicts() {
        jobs.add(.shared) { [self] in
            do {
                let dropped = try await outbox.dropUntold(nowMs: clock.nowMs)
                if dropped > 0 { logger.notice("upstream verdicts nobody came back for were dropped", metadata: ["count": "\(dropped)"]) }
            } catch {
                logger.error("cannot write the upstream outbox: \(error)")
            }
            retentionTimer = armTimer(.seconds(3600)) { [weak self] in self?.dropUntoldVerdicts() }
        }
    }

    // MARK: Telling the apps

    private struct AppKey: Hashable {
        let account: Account
        let appID: String
    }

    /// Where a job waits its turn (``SerialJobs``).
    private enum Lane: Hashable {
        /// One app's messages and verdicts, in the order they came.
        case app(AppKey)
        /// What spans the apps: the TTLs, the retention, the pending messages when a channel opens.
        case shared
    }

    /// A new manager: its app hears of the verdicts it has not been told,
    /// once CreateManager has answered (the caller learns the path from it).
    func managerCreated(_ manager: any UpstreamManager) {
        tellVerdicts(manager.account, appID: manager.appID)
    }

    /// `SendSucceeded` and `SendFailed` for an app's settled messages, to its
    /// live managers; kept while it has none.
    private func tellVerdicts(_ account: Account, appID: String) {
        jobs.add(.app(AppKey(account: account, appID: appID))) { [self] in
            guard !managers(account, appID).isEmpty else { return }
            do {
                let settled = try await outbox.takeSettled(account, appID: appID)
                let managers = managers(account, appID)
                for entry in settled {
                    guard let verdict = entry.verdict else { continue }
                    if managers.isEmpty {
                        try await outbox.keep(entry, nowMs: clock.nowMs)
                    } else {
                        tell(entry, verdict, to: managers)
                    }
                }
            } catch {
                logger.error("cannot read the upstream outbox: \(error)")
            }
        }
    }

    private func managers(_ account: Account, _ appID: String) -> [any UpstreamManager] {
        liveManagers().filter { $0.account == account && $0.appID == appID }
    }

    private func tell(_ entry: Outbox.Entry, _ verdict: Outbox.Verdict, to managers: [any UpstreamManager]) {
        logger.debug("upstream verdict told", metadata: ["app": "\(entry.appID)", "message": "\(entry.message.messageID)",
                                                         "verdict": "\(verdict)", "managers": "\(managers.count)"])
        for manager in managers { manager.emitVerdict(entry.message.messageID, verdict) }
    }

    /// An outbox entry as the channel carries it.
    private static func wire(_ entry: Outbox.Entry) -> ChannelUpstream {
        ChannelUpstream(app: entry.appID, messageId: entry.message.messageID, to: entry.message.to, data: entry.message.data,
                        expiresAtMs: entry.expiresAtMs)
    }

}
