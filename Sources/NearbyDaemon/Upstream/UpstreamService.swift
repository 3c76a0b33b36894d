import DBus
import Foundation
import Logging
import NearbyCore
import Upstream

/// Upstream messages on the device's side: `SendMessage` checks a message and
/// puts it in the durable outbox; the outbox is kept across restarts, and a
/// message whose TTL runs out before it is delivered is failed with
/// `SendFailed(id, "TTL_EXCEEDED", …)` to the sending app's managers, or, when
/// the app has none (it quit, nearbyd restarted), to its next manager.
///
/// The direct channel to the connection server is not built yet (issue 6):
/// nothing is delivered, a message with TTL 0 fails at once with
/// `SERVICE_NOT_AVAILABLE`, and one with a TTL waits in the outbox until it
/// runs out.
@BusActor
final class UpstreamService {
    private let outbox: Outbox
    private let logger: Logger
    /// The live managers of an app (its API key and app id), for its signals.
    private var managersOf: @BusActor (_ apiKey: String, _ appID: String) -> [ManagerObject] = { _, _ in [] }
    private var expiryTimer: BusTimer?

    init(outbox: Outbox, logger: Logger) {
        self.outbox = outbox
        self.logger = logger
    }

    /// Opens the outbox in `stateDirectory` (`outbox.sqlite`).
    static func openOutbox(stateDirectory: String, maxPendingPerApp: Int) throws -> Outbox {
        try Outbox(path: (stateDirectory as NSString).appendingPathComponent("outbox.sqlite"), maxPendingPerApp: maxPendingPerApp)
    }

    /// Picks up what an earlier run left pending; `managersOf` finds an app's
    /// live managers when one of its messages is settled.
    func start(managersOf: @escaping @BusActor (_ apiKey: String, _ appID: String) -> [ManagerObject]) {
        self.managersOf = managersOf
        do {
            let kept = try outbox.all()
            if !kept.isEmpty { logger.info("upstream messages kept from before", metadata: ["count": "\(kept.count)"]) }
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
        }
        armExpiry()
    }

    /// `SendMessage` from `manager`'s owner.
    func send(_ message: UpstreamMessage, from manager: ManagerObject) throws(NearbyError) {
        try message.validate()
        guard message.ttlSeconds > 0 else {
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
            throw .invalidArguments("message_id '\(message.messageID)' is already pending for this app")
        } catch Outbox.Refusal.full(let limit) {
            throw .limitExceeded("this app has \(limit) upstream messages pending already ([upstream] max-pending)")
        } catch {
            logger.error("cannot write the upstream outbox: \(error)")
            throw .limitExceeded("the outbox cannot take the message: \(error)")
        }
        logger.debug("upstream message accepted", metadata: ["app": "\(entry.appID)", "message": "\(message.messageID)",
                                                             "ttl": "\(message.ttlSeconds)"])
        armExpiry()
    }

    /// A timer for the next TTL to run out.
    private func armExpiry() {
        expiryTimer?.cancel()
        expiryTimer = nil
        let next: UInt64?
        do {
            next = try outbox.nextExpiryMs()
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
            return
        }
        guard let next else { return }
        let delay = Duration.milliseconds(Int64(next) - Int64(Self.nowMs))
        expiryTimer = BusTimer(after: max(delay, .zero)) { [weak self] in self?.expire() }
    }

    private func expire() {
        do {
            let failed = try outbox.failExpired(nowMs: Self.nowMs)
            for entry in failed {
                logger.info("upstream message expired", metadata: ["app": "\(entry.appID)", "message": "\(entry.message.messageID)"])
            }
            for app in Set(failed.map { [$0.apiKey, $0.appID] }) { tellFailures(apiKey: app[0], appID: app[1]) }
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
        }
        armExpiry()
    }

    /// A new manager: its app hears of the failures it has not been told,
    /// once CreateManager has answered (the caller learns the path from it).
    func managerCreated(_ object: ManagerObject) {
        Task { self.tellFailures(apiKey: object.manager.apiKey, appID: object.manager.appId) }
    }

    /// `SendFailed` for an app's failed messages, to its live managers; kept
    /// while it has none.
    private func tellFailures(apiKey: String, appID: String) {
        let managers = managersOf(apiKey, appID)
        guard !managers.isEmpty else { return }
        do {
            for entry in try outbox.takeFailed(apiKey: apiKey, appID: appID) {
                guard let failure = entry.failure else { continue }
                logger.debug("upstream failure told", metadata: ["app": "\(appID)", "message": "\(entry.message.messageID)",
                                                                 "error": "\(failure.error)", "managers": "\(managers.count)"])
                for manager in managers {
                    manager.emitSendFailed(entry.message.messageID, error: failure.error, description: failure.description)
                }
            }
        } catch {
            logger.error("cannot read the upstream outbox: \(error)")
        }
    }

    private static var nowMs: UInt64 { UInt64(Date().timeIntervalSince1970 * 1000) }
}
