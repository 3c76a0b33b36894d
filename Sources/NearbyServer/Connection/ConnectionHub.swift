import Foundation
import Logging
import ServerAPI

/// The connection server's routing: devices' direct channels on one side,
/// application servers' XMPP sessions on the other, the storage between them.
///
/// Upstream, a device's message is kept, then handed to one session of its
/// project's application servers (at most `maxUnackedPerSession` waiting for
/// an ack on each); an ack settles it and tells the device. A session that
/// ends without acking gives its messages back to the others, or to the next
/// one. Downstream, an application server's message is kept and acked, sent
/// on the device's channel while it is open, and removed once the device acks
/// it (with a delivery receipt when asked). Transports stay outside: a session
/// or channel is a stream of what to write, which its own task writes.
public actor ConnectionHub {
    /// An application server's session, as the hub sees it.
    private final class AppSession {
        let project: String
        let output: AsyncStream<String>.Continuation
        /// Upstream messages (by position) and receipts (by message id) it has not acked.
        var unacked: Set<Flight> = []
        /// Told CONNECTION_DRAINING: nothing new goes to it.
        var draining = false

        init(project: String, output: AsyncStream<String>.Continuation) {
            self.project = project
            self.output = output
        }
    }

    private enum Flight: Hashable {
        case upstream(Int64)
        case receipt(String)
    }

    private struct Channel {
        let id: UInt64
        let project: String
        let output: AsyncStream<ChannelEvent>.Continuation
    }

    /// How much the hub keeps for devices: events waiting to be written on
    /// a channel, and upstream messages kept per device.
    public struct DeviceLimits: Sendable {
        /// Events a channel may have waiting for its device to read; one
        /// more closes the channel (the device reconnects, and what it had
        /// waiting is kept and sent again).
        public var channelQueue: Int
        /// Upstream messages kept per device, pending or settled (kept to
        /// answer a repeat until a day after their expiry).
        public var upstreamPerDevice: Int
        /// Delivery receipts kept for a project's application servers; the
        /// oldest go first (an application server that never connects must
        /// not make them pile up).
        public var receiptsPerProject: Int

        public init(channelQueue: Int, upstreamPerDevice: Int, receiptsPerProject: Int) {
            self.channelQueue = channelQueue
            self.upstreamPerDevice = upstreamPerDevice
            self.receiptsPerProject = receiptsPerProject
        }
    }

    private let storage: any ServerStorage
    private let clock: any WallClock
    private let logger: Logger
    /// The XMPP domain: what `to` of a device's message must end with.
    public let domain: String
    private let maxUnackedPerSession: Int
    private let maxPendingDownstreamPerDevice: Int
    private let deviceLimits: DeviceLimits
    /// Why the hub ended a channel (its device did not read it, or was
    /// deleted), until the channel's endpoint has closed it.
    private var endReasons: [UInt64: String] = [:]

    private var sessions: [UInt64: AppSession] = [:]
    /// What is out with some session, per project, so that no two get it.
    private var inFlight: [String: Set<Flight>] = [:]
    private var channels: [String: Channel] = [:]
    private var nextID: UInt64 = 0
    private var pumping: Set<String> = []
    private var pumpAgain: Set<String> = []
    /// Per project, the position of the last upstream message handed out:
    /// everything before it is out, failed, or expired (the sweep's), so the
    /// next hand-out reads only after it.
    private var handedUpTo: [String: Int64] = [:]
    /// Projects whose hand-out reads from the start again: a session ended
    /// and gave back what it had not acked.
    private var rescan: Set<String> = []
    /// Per project, ids of just-received messages with no time left (TTL 0)
    /// that may go out on the next hand-out though they have expired.
    private var fresh: [String: Set<String>] = [:]
    private var draining = false

    public init(storage: any ServerStorage, clock: any WallClock, domain: String, maxUnackedPerSession: Int,
                maxPendingDownstreamPerDevice: Int, deviceLimits: DeviceLimits, logger: Logger) {
        self.storage = storage
        self.clock = clock
        self.domain = domain
        self.maxUnackedPerSession = maxUnackedPerSession
        self.maxPendingDownstreamPerDevice = maxPendingDownstreamPerDevice
        self.deviceLimits = deviceLimits
        self.logger = logger
    }

    // MARK: Application servers

    /// A new session of `project`'s application server; `output` yields the
    /// `<gcm>` payloads to write to it, in order.
    public func openSession(project: String) -> (id: UInt64, output: AsyncStream<String>) {
        nextID += 1
        let (output, continuation) = AsyncStream.makeStream(of: String.self)
        let session = AppSession(project: project, output: continuation)
        if draining {
            session.draining = true
            continuation.yield(CCSPayload.connectionDraining)
        }
        sessions[nextID] = session
        Task { await pump(project) }
        return (nextID, output)
    }

    /// The session ended: what it had not acked goes to the others. The
    /// project's last session takes the hub's state of the project with it
    /// (the next one reads from the start), so that a project whose servers
    /// have gone, or that was deleted, costs the hub nothing.
    public func closeSession(_ id: UInt64) {
        guard let session = sessions.removeValue(forKey: id) else { return }
        session.output.finish()
        let project = session.project
        guard sessions.values.contains(where: { $0.project == project }) else {
            inFlight[project] = nil
            handedUpTo[project] = nil
            rescan.remove(project)
            return
        }
        inFlight[project, default: []].subtract(session.unacked)
        if !session.unacked.isEmpty { rescan.insert(project) }
        Task { await pump(project) }
    }

    /// One `<gcm>` payload from a session; returns what to answer (an ack or
    /// nack), if anything.
    public func received(_ payload: String, from id: UInt64) async -> String? {
        guard let session = sessions[id] else { return nil }
        let incoming: CCSPayload.Incoming
        do {
            incoming = try CCSPayload.parse(payload)
        } catch {
            return CCSPayload.nack(error)
        }
        do {
            switch incoming {
            case .ack(let to, let messageId), .nack(let to, let messageId):
                return try await acked(to: to, messageId: messageId, by: session)
            case .downstream(let message):
                return try await downstream(message, from: session)
            }
        } catch {
            logger.error("connection server storage failed: \(error)")
            return CCSPayload.nack(.init(code: .internalServerError, description: "the server could not keep the message",
                                         messageId: incoming.messageId, to: incoming.to))
        }
    }

    private func acked(to: String, messageId: String, by session: AppSession) async throws -> String? {
        if session.unacked.contains(.receipt(messageId)) || messageId.hasPrefix("dr2:") {
            if try await storage.removeReceipt(project: session.project, messageId: messageId) {
                release(.receipt(messageId), of: session.project)
                Task { await pump(session.project) }
                return nil
            }
        }
        let settled = try await storage.settleUpstream(project: session.project, device: to, messageId: messageId,
                                                       verdict: .sent, atMs: clock.nowMs)
        guard let settled else {
            return CCSPayload.nack(.init(code: .badAck, description: "no message '\(messageId)' from '\(to)' is waiting for an ack",
                                         messageId: messageId, to: to))
        }
        release(.upstream(settled.position), of: session.project)
        tell(settled.device, .sent([ChannelMessageRef(app: settled.app, messageId: settled.messageId)]))
        Task { await pump(session.project) }
        return nil
    }

    private func release(_ flight: Flight, of project: String) {
        inFlight[project]?.remove(flight)
        for session in sessions.values where session.project == project { session.unacked.remove(flight) }
    }

    private func downstream(_ message: CCSPayload.Downstream, from session: AppSession) async throws -> String {
        func nack(_ code: CCSPayload.NackCode, _ description: String) -> String {
            CCSPayload.nack(.init(code: code, description: description, messageId: message.messageId, to: message.to))
        }
        // Shutting down: the application server sends it again on a connection to another replica.
        guard !draining else { return nack(.serviceUnavailable, "the server is shutting down (CONNECTION_DRAINING); send it again on a new connection") }
        switch try await storage.registration(message.to, project: session.project) {
        case .registered: break
        case .unregistered: return nack(.deviceUnregistered, "the device '\(message.to)' is no longer registered")
        case .unknown: return nack(.badRegistration, "no device '\(message.to)' in project '\(session.project)'")
        }
        guard !message.dryRun else { return CCSPayload.ack(messageId: message.messageId, from: message.to) }
        let now = clock.nowMs
        let channel = channels[message.to]
        // TTL 0: now or never. A device without its channel open never gets it.
        if message.timeToLive == 0, channel == nil {
            return CCSPayload.ack(messageId: message.messageId, from: message.to)
        }
        let stored = StoredDownstream(project: session.project, device: message.to, messageId: message.messageId, data: message.data,
                                      receivedAtMs: now, expiresAtMs: now + UInt64(message.timeToLive) * 1000,
                                      receiptRequested: message.deliveryReceiptRequested)
        guard try await storage.addDownstream(stored, limit: maxPendingDownstreamPerDevice) else {
            return nack(.deviceMessageRateExceeded,
                        "the device has \(maxPendingDownstreamPerDevice) messages waiting; send again once it has taken some")
        }
        tell(message.to, .message(ChannelDownstream(messageId: message.messageId, from: session.project, data: message.data)))
        return CCSPayload.ack(messageId: message.messageId, from: message.to)
    }

    /// Tells every session CONNECTION_DRAINING and gives them nothing new:
    /// their application servers should open new connections (elsewhere).
    public func drain() {
        draining = true
        for session in sessions.values where !session.draining {
            session.draining = true
            session.output.yield(CCSPayload.connectionDraining)
        }
    }

    // MARK: Devices

    /// A device opened its channel (replacing one it had); `output` yields
    /// what to write on it. Its waiting downstream messages go first. A
    /// device deleted since its request was authenticated gets a channel
    /// that has ended (`device unregistered`).
    public func openChannel(device: String, project: String) async -> (id: UInt64, output: AsyncStream<ChannelEvent>) {
        nextID += 1
        let id = nextID
        let (output, continuation) = AsyncStream.makeStream(of: ChannelEvent.self,
                                                            bufferingPolicy: .bufferingOldest(deviceLimits.channelQueue))
        channels[device]?.output.finish()
        // In place before the look-up: a deletion after it ends the channel through devicesDeleted.
        channels[device] = Channel(id: id, project: project, output: continuation)
        do {
            guard try await storage.registration(device, project: project) == .registered else {
                if channels[device]?.id == id { devicesDeleted([device]) }
                return (id, output)
            }
            for message in try await storage.pendingDownstream(device: device) {
                tell(device, .message(ChannelDownstream(messageId: message.messageId, from: message.project, data: message.data)))
            }
        } catch {
            logger.error("connection server storage failed: \(error)")
        }
        return (id, output)
    }

    public func closeChannel(device: String, id: UInt64) {
        endReasons[id] = nil
        guard channels[device]?.id == id else { return }
        channels.removeValue(forKey: device)?.output.finish()
    }

    /// Why the hub ended channel `id`'s events: its device did not read them,
    /// was deleted, or opened another channel. Asked once, by the channel's
    /// endpoint before it closes the channel: the hub then holds nothing of it.
    public func takeEndReason(of id: UInt64) -> String {
        endReasons.removeValue(forKey: id) ?? "replaced by a newer channel"
    }

    /// The devices were deleted: their channels end (a deleted device's
    /// channel would otherwise stay open, and be kept here, for as long as
    /// the device keeps its connection).
    public func devicesDeleted(_ devices: some Sequence<String>) {
        for device in devices {
            guard let channel = channels.removeValue(forKey: device) else { continue }
            endReasons[channel.id] = "device unregistered"
            channel.output.finish()
        }
    }

    /// What a device wrote on its channel.
    public func received(_ request: ChannelRequest, device: String, project: String) async {
        do {
            switch request {
            case .send(let message): try await upstream(message, device: device, project: project)
            // An id no message can have is looked for nowhere.
            case .ack(let messageId): if CCSPayload.isID(messageId) { try await deviceAcked(messageId, device: device, project: project) }
            }
        } catch {
            logger.error("connection server storage failed: \(error)")
        }
    }

    private func upstream(_ message: ChannelUpstream, device: String, project: String) async throws {
        func fail(_ error: String, _ description: String) {
            tell(device, .failed(ChannelFailure(app: message.app, messageId: message.messageId, error: error, description: description)))
        }
        guard message.to == "\(project)@\(domain)" else {
            // Said back in a few words: the answer never costs more than the question.
            return fail("INVALID_PARAMETERS", "to '\(message.to.prefix(64))' is not this project's application server (\(project)@\(domain))")
        }
        if let problem = Self.problem(with: message) { return fail("INVALID_PARAMETERS", problem) }
        let now = clock.nowMs
        // No message is kept longer than CCS's longest TTL, whatever its device says.
        let expiresAtMs = min(message.expiresAtMs, now + UInt64(CCSPayload.maximumTimeToLive) * 1000)
        let stored = StoredUpstream(project: project, device: device, app: message.app, messageId: message.messageId,
                                    data: message.data, receivedAtMs: now, expiresAtMs: expiresAtMs)
        switch try await storage.acceptUpstream(stored, limit: deviceLimits.upstreamPerDevice) {
        case .kept:
            break
        case .known(let known):
            // A repeat after a reconnect: its verdict, or nothing until it has one.
            switch known.verdict {
            case .sent: tell(device, .sent([ChannelMessageRef(app: known.app, messageId: known.messageId)]))
            case .failed(let error, let description): fail(error, description)
            case nil: break
            }
            return
        case .full(let kept):
            return fail("DEVICE_MESSAGE_RATE_EXCEEDED",
                        "the device has \(kept) upstream messages kept already ([limits] max-upstream-per-device); send again later")
        }
        if expiresAtMs <= now, !sessions.values.contains(where: { $0.project == project && !$0.draining }) {
            // TTL 0 (or out of time already) and no application server to take it now.
            _ = try await storage.settleUpstream(project: project, device: device, messageId: message.messageId,
                                                 verdict: Self.expiredVerdict(stored), atMs: now)
            return fail(Self.expiredVerdict(stored).code, "no application server of '\(project)' is connected")
        }
        if expiresAtMs <= now { fresh[project, default: []].insert(message.messageId) }
        await pump(project)
    }

    /// What is wrong with a device's message by CCS's rules (nearbyd checks
    /// them too; the server trusts no client).
    static func problem(with message: ChannelUpstream) -> String? {
        let size = message.data.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
        if size > CCSPayload.maximumDataBytes { return "data holds \(size) bytes; at most \(CCSPayload.maximumDataBytes) are allowed" }
        if let key = message.data.keys.sorted().first(where: {
            $0.isEmpty || $0 == "from" || $0 == "message_type" || $0.hasPrefix("google") || $0.hasPrefix("gcm")
        }) {
            return "data key '\(key)' is empty or reserved"
        }
        let limit = CCSPayload.maximumIDBytes
        guard CCSPayload.isID(message.messageId) else { return "messageId must be 1 to \(limit) bytes without control characters" }
        guard CCSPayload.isID(message.app) else { return "app must be 1 to \(limit) bytes without control characters" }
        return nil
    }

    private func deviceAcked(_ messageId: String, device: String, project: String) async throws {
        guard let message = try await storage.removeDownstream(device: device, messageId: messageId),
              message.receiptRequested else { return }
        let receipt = CCSPayload.receipt(originalMessageId: messageId, device: device, domain: domain, sentAtMs: clock.nowMs)
        let dropped = try await storage.addReceipt(StoredReceipt(project: message.project, messageId: receipt.messageId,
                                                                 payload: receipt.payload),
                                                   limit: deviceLimits.receiptsPerProject)
        if dropped > 0 {
            logger.notice("delivery receipts nobody took were dropped",
                          metadata: ["project": "\(message.project)", "count": "\(dropped)"])
        }
        await pump(message.project)
    }

    /// Queues an event on the device's channel; a device that leaves its
    /// queue full loses the channel (what it lost is kept and sent again on
    /// the next one).
    private func tell(_ device: String, _ event: ChannelEvent) {
        guard let channel = channels[device] else { return }
        if case .dropped = channel.output.yield(event) {
            logger.notice("a device does not read its channel; closed", metadata: ["device": "\(device)"])
            endReasons[channel.id] = "the device left \(deviceLimits.channelQueue) events unread ([limits] max-channel-queue)"
            channels.removeValue(forKey: device)
            channel.output.finish()
        }
    }

    /// What the hub holds now for sessions and channels (tests count it).
    struct Holdings: Equatable {
        var sessions: Int
        /// Messages and receipts out with some session, all projects together.
        var inFlight: Int
        var channels: Int
        /// Channels the hub ended whose endpoints have not closed them yet.
        var endedChannels: Int
        /// Projects the hub keeps hand-out state for (a hand-out under way aside).
        var projects: Int
    }

    var holdings: Holdings {
        let projects = Set(inFlight.keys).union(handedUpTo.keys).union(rescan).union(fresh.keys)
        return Holdings(sessions: sessions.count, inFlight: inFlight.values.reduce(0) { $0 + $1.count }, channels: channels.count,
                        endedChannels: endReasons.count, projects: projects.count)
    }

    // MARK: Handing out

    /// Gives each session of `project` what is waiting, up to its limit.
    private func pump(_ project: String) async {
        guard pumping.insert(project).inserted else {
            pumpAgain.insert(project)
            return
        }
        defer { pumping.remove(project) }
        repeat {
            pumpAgain.remove(project)
            do {
                try await handOut(project)
            } catch {
                logger.error("connection server storage failed: \(error)")
            }
        } while pumpAgain.contains(project)
    }

    private func handOut(_ project: String) async throws {
        // A TTL-0 message that does not go out now never does (the sweep fails it).
        let fresh = self.fresh.removeValue(forKey: project) ?? []
        let open = sessions.values.filter { $0.project == project && !$0.draining }
        let room = open.reduce(0) { $0 + max(0, maxUnackedPerSession - $1.unacked.count) }
        guard room > 0 else { return }
        let busy = inFlight[project] ?? []
        let receipts = try await storage.receipts(project: project, after: 0, limit: room + busy.count)
            .filter { !busy.contains(.receipt($0.messageId)) }
        let now = clock.nowMs
        let after = rescan.remove(project) != nil ? 0 : handedUpTo[project] ?? 0
        let messages = try await storage.pendingUpstream(project: project, after: after, limit: room + busy.count)
            .filter { !busy.contains(.upstream($0.position)) && ($0.expiresAtMs > now || fresh.contains($0.messageId)) }
        var work: [(Flight, String)] = receipts.map { (.receipt($0.messageId), $0.payload) }
        work += messages.map {
            (.upstream($0.position), CCSPayload.upstream(app: $0.app, from: $0.device, messageId: $0.messageId, data: $0.data))
        }
        var next = work.makeIterator()
        var handed = after
        // The sessions may have changed while storage was read.
        for session in sessions.values where session.project == project && !session.draining {
            while session.unacked.count < maxUnackedPerSession, let (flight, payload) = next.next() {
                guard !(inFlight[project]?.contains(flight) ?? false) else { continue }
                session.unacked.insert(flight)
                inFlight[project, default: []].insert(flight)
                session.output.yield(payload)
                if case .upstream(let position) = flight { handed = position }
            }
        }
        // Its last session may have ended while storage was read, taking the project's state.
        if sessions.values.contains(where: { $0.project == project }) { handedUpTo[project] = handed }
    }

    // MARK: Time

    /// Fails upstream messages whose time ran out before any application
    /// server acked them, drops downstream messages likewise, and forgets
    /// verdicts a device can no longer ask about.
    public func sweep() async {
        let now = clock.nowMs
        do {
            for message in try await storage.expiredUpstream(nowMs: now, limit: 1000) {
                guard !(inFlight[message.project]?.contains(.upstream(message.position)) ?? false) else { continue }
                let verdict = Self.expiredVerdict(message)
                guard let settled = try await storage.settleUpstream(project: message.project, device: message.device,
                                                                     messageId: message.messageId, verdict: verdict, atMs: now)
                else { continue }
                tell(settled.device, .failed(ChannelFailure(app: settled.app, messageId: settled.messageId, error: verdict.code,
                                                            description: verdict.text)))
            }
            _ = try await storage.removeExpiredDownstream(nowMs: now)
            // A device may repeat a message for as long as it keeps it: up to its TTL.
            try await storage.purgeSettledUpstream(expiredBeforeMs: now > Self.verdictRetentionMs ? now - Self.verdictRetentionMs : 0)
        } catch {
            logger.error("connection server sweep failed: \(error)")
        }
    }

    /// How long after its expiry a verdict is kept, for a device that was
    /// offline when it was given.
    static let verdictRetentionMs: UInt64 = 86_400_000

    private static func expiredVerdict(_ message: StoredUpstream) -> UpstreamVerdict {
        message.expiresAtMs <= message.receivedAtMs
            ? .failed(error: "SERVICE_NOT_AVAILABLE", description: "TTL 0 and no application server took it at once")
            : .failed(error: "TTL_EXCEEDED", description: "no application server acknowledged it within its TTL")
    }
}

extension UpstreamVerdict {
    var code: String {
        switch self {
        case .sent: "SENT"
        case .failed(let error, _): error
        }
    }

    var text: String {
        switch self {
        case .sent: ""
        case .failed(_, let description): description
        }
    }
}

extension CCSPayload.Incoming {
    var messageId: String {
        switch self {
        case .ack(_, let id), .nack(_, let id): id
        case .downstream(let message): message.messageId
        }
    }

    var to: String {
        switch self {
        case .ack(let to, _), .nack(let to, _): to
        case .downstream(let message): message.to
        }
    }
}
