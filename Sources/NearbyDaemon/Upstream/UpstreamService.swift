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
/// of its API key (one per key, open while some manager of the key has
/// `DirectChannel` set and is in the foreground) carries it: every pending
/// message of the key when the channel opens, in the order they were
/// accepted, and each new one at once. The server answers `sent` (the
/// application server acknowledged it: `SendSucceeded`) or `failed`
/// (`SendFailed`); each goes to the sending app's live managers or, when the
/// app has none (it quit, nearbyd restarted), waits in the outbox for its next
/// manager. While a key's channel is open the server judges its messages'
/// TTLs; otherwise a message whose TTL runs out fails here with
/// `TTL_EXCEEDED`, and one with TTL 0 fails at once with `SERVICE_NOT_AVAILABLE`.
///
/// Downstream messages go to every live manager of the key (`MessageReceived`)
/// and are then acknowledged; the server repeats a message until it has the
/// acknowledgement, so an app may see one again after a reconnect.
@BusActor
final class UpstreamService {
    private let outbox: Outbox
    private let logger: Logger
    /// Makes the channel of an API key.
    private let makeChannel: @BusActor (_ apiKey: String) -> DirectChannel
    /// Every live manager, for the signals and the channels' wishes.
    private var liveManagers: @BusActor () -> [ManagerObject] = { [] }
    /// The channels wanted now, by API key.
    private var channels: [String: DirectChannel] = [:]
    private var expiryTimer: BusTimer?

    init(outbox: Outbox, logger: Logger, makeChannel: @escaping @BusActor (_ apiKey: String) -> DirectChannel) {
        self.outbox = outbox
        self.logger = logger
        self.makeChannel = makeChannel
    }

    /// Opens the outbox in `stateDirectory` (`outbox.sqlite`).
    static func openOutbox(stateDirectory: String, maxPendingPerApp: Int) throws -> Outbox {
        try Outbox(path: (stateDirectory as NSString).appendingPathComponent("outbox.sqlite"), maxPendingPerApp: maxPendingPerApp)
    }

    /// Picks up what an earlier run left pending; `managers` lists the live
    /// managers whenever a message is settled or a channel's wish may change.
    func start(managers: @escaping @BusActor () -> [ManagerObject]) {
        liveManagers = managers
        do {
            let kept = try outbox.all()
            if !kept.isEmpty { logger.info("upstream messages kept from before", metadata: ["count": "\(kept.count)"]) }
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
        }
        armExpiry()
    }

    /// Closes every channel.
    func stop() {
        for channel in channels.values { channel.wanted = false }
        channels.removeAll()
        expiryTimer?.cancel()
    }

    /// `SendMessage` from `manager`'s owner.
    func send(_ message: UpstreamMessage, from manager: ManagerObject) throws(NearbyError) {
        try message.validate()
        let channel = channels[manager.manager.apiKey].flatMap { $0.isOpen ? $0 : nil }
        guard message.ttlSeconds > 0 || channel != nil else {
            // Now or never, and there is no channel: failed once the call has answered.
            Task { manager.emitSendFailed(message.messageID, error: "SERVICE_NOT_AVAILABLE",
                                          description: "no direct channel to the connection server, and the TTL is 0") }
            return
        }
        let entry = Outbox.Entry(apiKey: manager.manager.apiKey, appID: manager.manager.appId, message: message,
                                 acceptedAtMs: Self.nowMs)
        do {
            try outbox.add(entry)
        } catch Outbox.Refusal.duplicateID {
            throw .invalidArguments("message_id '\(message.messageID)' is already pending for an app of this API key")
        } catch Outbox.Refusal.full(let limit) {
            throw .limitExceeded("this app has \(limit) upstream messages pending already ([upstream] max-pending)")
        } catch {
            logger.error("cannot write the upstream outbox: \(error)")
            throw .limitExceeded("the outbox cannot take the message: \(error)")
        }
        logger.debug("upstream message accepted", metadata: ["app": "\(entry.appID)", "message": "\(message.messageID)",
                                                             "ttl": "\(message.ttlSeconds)", "channel": "\(channel != nil)"])
        if let channel {
            channel.send(.send(Self.wire(entry)))
        } else {
            armExpiry()
        }
    }

    // MARK: The direct channels

    /// Whether the channel of `apiKey` is open: `DirectChannelConnected` of its managers.
    func isChannelOpen(_ apiKey: String) -> Bool {
        channels[apiKey]?.isOpen ?? false
    }

    /// Opens or closes the channel of `apiKey` as its managers now want: it
    /// is wanted while one of them has `DirectChannel` set and is not in the
    /// background. Called whenever one of those may have changed.
    func managersChanged(apiKey: String) {
        let wishes = liveManagers().filter { $0.manager.apiKey == apiKey }
            .map { manager -> (directChannel: Bool, background: Bool) in (manager.directChannel, manager.background) }
        let wanted = Self.wantsChannel(wishes)
        if wanted, channels[apiKey] == nil {
            let channel = makeChannel(apiKey)
            channel.onOpenChanged = { [weak self] open in self?.channel(apiKey, isOpen: open) }
            channel.onEvent = { [weak self, weak channel] event in
                guard let self, let channel else { return }
                self.handle(event, on: channel)
            }
            channels[apiKey] = channel
            channel.wanted = true
        } else if !wanted, let channel = channels.removeValue(forKey: apiKey) {
            channel.wanted = false
        }
    }

    /// A key's channel is wanted while one of its managers has `DirectChannel`
    /// set and is in the foreground.
    nonisolated static func wantsChannel(_ managers: some Sequence<(directChannel: Bool, background: Bool)>) -> Bool {
        managers.contains { $0.directChannel && !$0.background }
    }

    private func channel(_ apiKey: String, isOpen: Bool) {
        for manager in liveManagers() where manager.manager.apiKey == apiKey { manager.directChannelConnectedChanged() }
        if isOpen, let channel = channels[apiKey] {
            do {
                let pending = try outbox.pending(apiKey: apiKey)
                logger.debug("sending the pending upstream messages", metadata: ["count": "\(pending.count)"])
                for entry in pending { channel.send(.send(Self.wire(entry))) }
            } catch {
                logger.error("cannot read the upstream outbox: \(error)")
            }
        }
        // Open, the server judges the key's TTLs; closed, they run out here again.
        armExpiry()
    }

    private func handle(_ event: ChannelEvent, on channel: DirectChannel) {
        switch event {
        case .sent(let refs):
            for ref in refs { settle(channel.apiKey, ref.app, ref.messageId, .succeeded) }
        case .failed(let failure):
            settle(channel.apiKey, failure.app, failure.messageId,
                   .failed(Outbox.Failure(error: failure.error, description: failure.description)))
        case .message(let message):
            let managers = liveManagers().filter { $0.manager.apiKey == channel.apiKey }
            logger.debug("downstream message", metadata: ["message": "\(message.messageId)", "from": "\(message.from)",
                                                          "managers": "\(managers.count)"])
            for manager in managers { manager.emitMessageReceived(message) }
            channel.send(.ack(messageId: message.messageId))
        }
    }

    private func settle(_ apiKey: String, _ appID: String, _ messageID: String, _ verdict: Outbox.Verdict) {
        let managers = managers(apiKey: apiKey, appID: appID)
        do {
            // A verdict for a message settled already (repeated after a reconnect) is dropped.
            // With the app here it is told at once, in one transaction; otherwise kept for its next manager.
            guard let entry = try outbox.settle(apiKey: apiKey, appID: appID, messageID: messageID, verdict,
                                                told: !managers.isEmpty) else { return }
            tell(entry, verdict, to: managers)
        } catch {
            logger.error("cannot write the upstream outbox: \(error)")
        }
    }

    // MARK: TTLs

    /// A timer for the next TTL to run out, outside the keys whose channel is open.
    private func armExpiry() {
        expiryTimer?.cancel()
        expiryTimer = nil
        let next: UInt64?
        do {
            next = try outbox.nextExpiryMs(sparing: openKeys)
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
            return
        }
        guard let next else { return }
        let delay = Duration.milliseconds(Int64(next) - Int64(Self.nowMs))
        expiryTimer = BusTimer(after: max(delay, .zero)) { [weak self] in self?.expire() }
    }

    private var openKeys: Set<String> {
        Set(channels.values.filter { $0.isOpen }.map { $0.apiKey })
    }

    private func expire() {
        do {
            let failed = try outbox.failExpired(nowMs: Self.nowMs, sparing: openKeys)
            for entry in failed {
                logger.info("upstream message expired", metadata: ["app": "\(entry.appID)", "message": "\(entry.message.messageID)"])
            }
            for app in Set(failed.map { [$0.apiKey, $0.appID] }) { tellVerdicts(apiKey: app[0], appID: app[1]) }
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
        }
        armExpiry()
    }

    // MARK: Telling the apps

    /// A new manager: its app hears of the verdicts it has not been told,
    /// once CreateManager has answered (the caller learns the path from it).
    func managerCreated(_ object: ManagerObject) {
        Task { self.tellVerdicts(apiKey: object.manager.apiKey, appID: object.manager.appId) }
    }

    /// `SendSucceeded` and `SendFailed` for an app's settled messages, to its
    /// live managers; kept while it has none.
    private func tellVerdicts(apiKey: String, appID: String) {
        let managers = managers(apiKey: apiKey, appID: appID)
        guard !managers.isEmpty else { return }
        do {
            for entry in try outbox.takeSettled(apiKey: apiKey, appID: appID) {
                guard let verdict = entry.verdict else { continue }
                tell(entry, verdict, to: managers)
            }
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
        }
    }

    private func managers(apiKey: String, appID: String) -> [ManagerObject] {
        liveManagers().filter { $0.manager.apiKey == apiKey && $0.manager.appId == appID }
    }

    private func tell(_ entry: Outbox.Entry, _ verdict: Outbox.Verdict, to managers: [ManagerObject]) {
        logger.debug("upstream verdict told", metadata: ["app": "\(entry.appID)", "message": "\(entry.message.messageID)",
                                                         "verdict": "\(verdict)", "managers": "\(managers.count)"])
        for manager in managers { manager.emitVerdict(entry.message.messageID, verdict) }
    }

    /// An outbox entry as the channel carries it.
    private static func wire(_ entry: Outbox.Entry) -> ChannelUpstream {
        ChannelUpstream(app: entry.appID, messageId: entry.message.messageID, to: entry.message.to, data: entry.message.data,
                        expiresAtMs: entry.expiresAtMs)
    }

    private static var nowMs: UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }
}
