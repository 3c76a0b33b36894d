import Foundation
import Logging
import NearbyCore
import Partitions
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
///
/// Replicas on one database each have a hub. A hub hands out only what it
/// has claimed in storage for its replica (a lease, renewed while its
/// sessions hold the message, given back when they end without acking), so
/// that one message is out with one session of all replicas' at a time; and
/// it tells the others' hubs, over a ``ConnectionEventFeed``, what their
/// sessions and channels may need: something waiting for a project, an
/// event for a device whose channel is elsewhere.
public actor ConnectionHub {
    /// An application server's session, as the hub sees it.
    private final class AppSession {
        let project: String
        let output: AsyncStream<[String]>.Continuation
        /// Upstream messages (by position) and receipts (by message id) it has not acked.
        var unacked: Set<Flight> = []
        /// Told CONNECTION_DRAINING: nothing new goes to it.
        var draining = false
        /// Its last downstream message being kept: the next one is written
        /// on its device's channel after it, in the order they came.
        var lastDownstream: Task<String?, any Error>?

        init(project: String, output: AsyncStream<[String]>.Continuation) {
            self.project = project
            self.output = output
        }
    }

    /// Something out with a session: an upstream message or a receipt, by position.
    private enum Flight: Hashable {
        /// A device's message, with what an ack names it by.
        case upstream(Int64, device: String, messageId: String)
        case receipt(Int64, messageId: String)
    }

    private struct Channel {
        let id: UInt64
        let project: String
        let output: AsyncStream<ChannelEvent>.Continuation
        /// Ids of the downstream messages written to it and not acked yet:
        /// each is written once, however many replicas say it is waiting.
        var told: Set<String> = []
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
    /// The hot path's writes, committed together (group commit).
    private let writer: ConnectionWriter
    private let clock: any WallClock
    /// The replica whose claims this hub makes.
    private let replica: String
    /// How long a claim lasts unless renewed.
    private let leaseMs: UInt64
    /// When claims were last renewed.
    private var renewedAtMs: UInt64 = 0
    /// The other replicas' hubs, when there are any.
    private var others: ConnectionEventFeed?
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
    private var channels: [String: Channel] = [:]
    private var nextID: UInt64 = 0
    private var pumping: Set<String> = []
    private var pumpAgain: Set<String> = []
    /// Projects whose hand-out under way tells the others if it leaves something.
    private var announceAfterPump: Set<String> = []
    private var draining = false

    /// A message received without time (TTL 0) goes out now or never: "now"
    /// is this long after it was received, time for the replica whose
    /// session takes it to hear of it.
    static let ttlZeroGraceMs: UInt64 = 1000

    /// - Parameters:
    ///   - replica: the name of this replica's claims in storage.
    ///   - leaseMs: how long a claim lasts unless renewed: a replica that
    ///     dies leaves its sessions' messages to the others this long after.
    public init(storage: any ServerStorage, clock: any WallClock, replica: String, leaseMs: UInt64, domain: String,
                maxUnackedPerSession: Int, maxPendingDownstreamPerDevice: Int, deviceLimits: DeviceLimits, logger: Logger) {
        self.storage = storage
        writer = ConnectionWriter(storage: storage)
        self.clock = clock
        self.replica = replica
        self.leaseMs = leaseMs
        self.domain = domain
        self.maxUnackedPerSession = maxUnackedPerSession
        self.maxPendingDownstreamPerDevice = maxPendingDownstreamPerDevice
        self.deviceLimits = deviceLimits
        self.logger = logger
    }

    /// Starts the hub: alone on its database (`bus` nil), it gives up every
    /// claim a server before it left; among replicas, it listens to the
    /// others' hubs on `bus`.
    func start(bus: (any ReplicaBus)?) async throws {
        guard let bus else { return try await storage.releaseAllClaims() }
        others = ConnectionEventFeed(bus: bus, replica: replica, logger: logger) { [weak self] delivery in
            await self?.receive(delivery)
        }
    }

    private func receive(_ delivery: ConnectionEventFeed.Delivery) async {
        switch delivery {
        case .event(.waiting(let project)):
            pump(project)
        case .event(.tell(let device, let event)):
            tell(device, event)
        case .event(.downstreamWaiting(let device)):
            if let channel = channels[device] { await resend(to: device, id: channel.id) }
        case .joined:
            // What the others said while this replica was away is in storage.
            for project in Set(sessions.values.map(\.project)) { pump(project) }
            for (device, channel) in channels { await resend(to: device, id: channel.id) }
        }
    }

    /// Says `event` to the others' hubs, if there are any.
    private func announce(_ event: ConnectionEvent) async {
        await others?.publish(event)
    }

    // MARK: Application servers

    /// A new session of `project`'s application server; `output` yields the
    /// `<gcm>` payloads to write to it, in order, those handed out together
    /// in one array (written with one flush: under load, a hundred stanzas
    /// cost about one write's system calls and TLS record instead of a hundred).
    public func openSession(project: String) -> (id: UInt64, output: AsyncStream<[String]>) {
        nextID += 1
        let (output, continuation) = AsyncStream.makeStream(of: [String].self)
        let session = AppSession(project: project, output: continuation)
        if draining {
            session.draining = true
            continuation.yield([CCSPayload.connectionDraining])
        }
        sessions[nextID] = session
        pump(project)
        return (nextID, output)
    }

    /// The session ended: what it had not acked is given back, to the
    /// project's other sessions here or on other replicas.
    public func closeSession(_ id: UInt64) async {
        guard let session = sessions.removeValue(forKey: id) else { return }
        session.output.finish()
        guard !session.unacked.isEmpty else { return }
        do {
            try await release(session.unacked)
        } catch {
            // Kept claimed until the lease lapses (not renewed: no session holds them), then handed out again.
            logger.error("connection server storage failed: \(error)")
            return
        }
        pumpOrAnnounce(session.project)
    }

    /// Gives up this replica's claims on `flights`. Queued after what the
    /// sessions asked before (their acks): a message acked on a session that
    /// then ends is settled before it is given back, never handed out again.
    private func release(_ flights: some Collection<Flight>) async throws {
        let (upstream, receipts) = Self.positions(of: flights)
        _ = try await writer.enqueue(.releaseClaims(replica: replica, upstream: upstream, receipts: receipts)).result()
    }

    private static func positions(of flights: some Collection<Flight>) -> (upstream: [Int64], receipts: [Int64]) {
        var upstream: [Int64] = []
        var receipts: [Int64] = []
        for flight in flights {
            switch flight {
            case .upstream(let position, _, _): upstream.append(position)
            case .receipt(let position, _): receipts.append(position)
            }
        }
        return (upstream, receipts)
    }

    /// How many payloads a session may have taken whose answers are not
    /// out yet: its reader waits beyond (``take(_:from:)``).
    public nonisolated var sessionWindow: Int { maxUnackedPerSession }

    /// One `<gcm>` payload from a session; returns what to answer (an ack or
    /// nack), if anything, once what it asked for has committed.
    public func received(_ payload: String, from id: UInt64) async -> String? {
        await take(payload, from: id).value
    }

    /// Takes one `<gcm>` payload from a session: what it asks for is queued
    /// for storage in the order the session sent it, and the task answers
    /// (an ack or nack, if anything) once that has committed. A session
    /// takes its next payload without waiting for the answer, so that its
    /// acks commit together (``ConnectionWriter``).
    public func take(_ payload: String, from id: UInt64) async -> Task<String?, Never> {
        guard let session = sessions[id] else { return Task { nil } }
        let incoming: CCSPayload.Incoming
        do {
            incoming = try CCSPayload.parse(payload)
        } catch {
            let nack = CCSPayload.nack(error)
            return Task { nack }
        }
        let work: Task<String?, any Error>
        switch incoming {
        case .ack(let to, let messageId), .nack(let to, let messageId):
            work = acked(to: to, messageId: messageId, by: session)
        case .downstream(let message):
            work = await downstream(message, from: session)
        }
        let logger = logger
        return Task {
            do {
                return try await work.value
            } catch {
                logger.error("connection server storage failed: \(error)")
                return CCSPayload.nack(.init(code: .internalServerError, description: "the server could not keep the message",
                                             messageId: incoming.messageId, to: incoming.to))
            }
        }
    }

    /// Queues what an ack settles (a receipt, or a device's message) and
    /// returns the task that answers once it has committed.
    private func acked(to: String, messageId: String, by session: AppSession) -> Task<String?, any Error> {
        let project = session.project
        let settlement = ConnectionWrite.settleUpstream(project: project, device: to, messageId: messageId, verdict: .sent,
                                                        atMs: clock.nowMs)
        let heldReceipt = session.unacked.contains { if case .receipt(_, messageId) = $0 { true } else { false } }
        let removal = heldReceipt || messageId.hasPrefix("dr2:")
            ? writer.enqueue(.removeReceipt(project: project, messageId: messageId)) : nil
        // Queued now, unless a receipt of that id may be what is acked.
        let settling = removal == nil ? writer.enqueue(settlement) : nil
        // Acked, it no longer counts against the session's 100 (CCS counts what
        // the application server has not acked): its place is filled at once,
        // by a claim queued after the settlement, so the two commit together
        // rather than one after the other. Should the settlement fail, the
        // message's claim lapses unrenewed and it is handed out again.
        if settling != nil, let held = session.unacked.first(where: {
            if case .upstream(_, to, messageId) = $0 { true } else { false }
        }) {
            session.unacked.remove(held)
            pump(project)
        }
        return Task {
            if let removal, case .removed(true) = try await removal.result() {
                self.forget { if case .receipt(_, messageId) = $0 { true } else { false } }
                self.pump(project)
                return nil
            }
            guard case .settled(let settled) = try await (settling ?? self.writer.enqueue(settlement)).result() else {
                throw GroupCommitMismatch()
            }
            guard let settled else {
                return CCSPayload.nack(.init(code: .badAck, description: "no message '\(messageId)' from '\(to)' is waiting for an ack",
                                             messageId: messageId, to: to))
            }
            // Acked on another session than it went out on (the application server reconnected): that one holds it no more.
            self.forget { if case .upstream(settled.position, _, _) = $0 { true } else { false } }
            await self.tellDevice(settled.device, .sent([ChannelMessageRef(app: settled.app, messageId: settled.messageId)]))
            self.pump(project)
            return nil
        }
    }

    /// Settled: no session here holds the flights `matching` picks any more.
    private func forget(where matching: (Flight) -> Bool) {
        for session in sessions.values { session.unacked = session.unacked.filter { !matching($0) } }
    }

    /// Checks a downstream message and queues it for its device; returns the
    /// task that answers once it has committed.
    private func downstream(_ message: CCSPayload.Downstream, from session: AppSession) async -> Task<String?, any Error> {
        func answer(_ code: CCSPayload.NackCode, _ description: String) -> Task<String?, any Error> {
            let nack = CCSPayload.nack(.init(code: code, description: description, messageId: message.messageId, to: message.to))
            return Task { nack }
        }
        let ack = CCSPayload.ack(messageId: message.messageId, from: message.to)
        // Shutting down: the application server sends it again on a connection to another replica.
        guard !draining else {
            return answer(.serviceUnavailable, "the server is shutting down (CONNECTION_DRAINING); send it again on a new connection")
        }
        let registration: RegistrationState
        do {
            registration = try await storage.registration(message.to, project: session.project)
        } catch {
            return Task { throw error }
        }
        switch registration {
        case .registered: break
        case .unregistered: return answer(.deviceUnregistered, "the device '\(message.to)' is no longer registered")
        case .unknown: return answer(.badRegistration, "no device '\(message.to)' in project '\(session.project)'")
        }
        guard !message.dryRun else { return Task { ack } }
        let now = clock.nowMs
        // TTL 0: now or never. A device without its channel open never gets it
        // (among replicas, its channel may be open elsewhere).
        if message.timeToLive == 0, others == nil, channels[message.to] == nil { return Task { ack } }
        let stored = StoredDownstream(project: session.project, device: message.to, messageId: message.messageId, data: message.data,
                                      receivedAtMs: now, expiresAtMs: now + UInt64(message.timeToLive) * 1000,
                                      receiptRequested: message.deliveryReceiptRequested)
        let adding = writer.enqueue(.addDownstream(stored, limit: maxPendingDownstreamPerDevice))
        let limit = maxPendingDownstreamPerDevice
        let previous = session.lastDownstream
        let task = Task<String?, any Error> {
            // Committed together, told in order.
            _ = try? await previous?.value
            guard case .added(let added) = try await adding.result() else { throw GroupCommitMismatch() }
            guard added else {
                return CCSPayload.nack(.init(code: .deviceMessageRateExceeded,
                                             description: "the device has \(limit) messages waiting; send again once it has taken some",
                                             messageId: message.messageId, to: message.to))
            }
            await self.tellDevice(message.to, .message(ChannelDownstream(messageId: message.messageId, from: session.project,
                                                                         data: message.data)))
            return ack
        }
        session.lastDownstream = task
        return task
    }

    /// Tells every session CONNECTION_DRAINING and gives them nothing new:
    /// their application servers should open new connections (elsewhere).
    public func drain() {
        draining = true
        for session in sessions.values where !session.draining {
            session.draining = true
            session.output.yield([CCSPayload.connectionDraining])
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
        } catch {
            logger.error("connection server storage failed: \(error)")
        }
        await resend(to: device, id: id)
        return (id, output)
    }

    /// Writes on channel `id` of `device` its waiting downstream messages that it has not been given.
    private func resend(to device: String, id: UInt64) async {
        do {
            let waiting = try await storage.pendingDownstream(device: device)
            guard channels[device]?.id == id else { return }
            // What was written and has gone since (expired) is written no more.
            channels[device]!.told.formIntersection(waiting.map(\.messageId))
            for message in waiting {
                tell(device, .message(ChannelDownstream(messageId: message.messageId, from: message.project, data: message.data)))
            }
        } catch {
            logger.error("connection server storage failed: \(error)")
        }
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

    /// The channels of devices that another replica serves now, by
    /// `owners` (each partition's replica, nil where none does), end: each
    /// device reconnects and is sent there (a channel opened here while
    /// nobody served its partition, or before this replica gave it up).
    public func closeChannels(servedElsewhere owners: [String?]) {
        for device in channels.keys.sorted() {
            guard let owner = owners[Partition.of(device: device)], owner != replica,
                  let channel = channels.removeValue(forKey: device) else { continue }
            endReasons[channel.id] = "the device is served by another replica now"
            channel.output.finish()
        }
    }

    /// What a device wrote on its channel.
    public func received(_ request: ChannelRequest, device: String, project: String) async {
        do {
            switch request {
            case .send(let message): try await upstream(message, device: device, project: project)
            // An id no message can have is looked for nowhere.
            case .ack(let messageId): if CCSRules.isID(messageId) { try await deviceAcked(messageId, device: device, project: project) }
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
        let expiresAtMs = min(message.expiresAtMs, now + UInt64(CCSRules.maximumTimeToLiveSeconds) * 1000)
        let stored = StoredUpstream(project: project, device: device, app: message.app, messageId: message.messageId,
                                    data: message.data, receivedAtMs: now, expiresAtMs: expiresAtMs)
        guard case .accepted(let acceptance) = try await writer.enqueue(.acceptUpstream(stored, limit: deviceLimits.upstreamPerDevice))
            .result() else { throw GroupCommitMismatch() }
        switch acceptance {
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
        if expiresAtMs <= now, others == nil, !sessions.values.contains(where: { $0.project == project && !$0.draining }) {
            // TTL 0 (or out of time already) and no application server to take it now. (Among
            // replicas, one may be connected elsewhere: the sweep fails it after the grace.)
            _ = try await writer.enqueue(.settleUpstream(project: project, device: device, messageId: message.messageId,
                                                         verdict: Self.expiredVerdict(stored), atMs: now)).result()
            return fail(Self.expiredVerdict(stored).code, "no application server of '\(project)' is connected")
        }
        pumpOrAnnounce(project)
    }

    /// What is wrong with a device's message by CCS's rules (nearbyd checks
    /// them too; the server trusts no client).
    static func problem(with message: ChannelUpstream) -> String? {
        if let problem = CCSRules.dataProblem(message.data) { return problem }
        let limit = CCSRules.maximumIDBytes
        guard CCSRules.isID(message.messageId) else { return "messageId must be 1 to \(limit) bytes without control characters" }
        guard CCSRules.isID(message.app) else { return "app must be 1 to \(limit) bytes without control characters" }
        return nil
    }

    private func deviceAcked(_ messageId: String, device: String, project: String) async throws {
        channels[device]?.told.remove(messageId)
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
        pumpOrAnnounce(message.project)
    }

    /// Tells the device `event` on its channel, here or, among replicas,
    /// wherever it is open.
    private func tellDevice(_ device: String, _ event: ChannelEvent) async {
        if channels[device] != nil {
            tell(device, event)
        } else {
            await announce(.tell(device: device, event))
        }
    }

    /// Queues an event on the device's channel if it is open here; a device
    /// that leaves its queue full loses the channel (what it lost is kept and
    /// sent again on the next one). A downstream message it has been given
    /// is not given again.
    private func tell(_ device: String, _ event: ChannelEvent) {
        guard let channel = channels[device] else { return }
        if case .message(let message) = event {
            guard channels[device]!.told.insert(message.messageId).inserted else { return }
        }
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
    }

    var holdings: Holdings {
        Holdings(sessions: sessions.count, inFlight: sessions.values.reduce(0) { $0 + $1.unacked.count }, channels: channels.count,
                 endedChannels: endReasons.count)
    }

    // MARK: Handing out

    /// Hands out what is waiting for `project` here; tells the other
    /// replicas when some may be left for their sessions. (What the others
    /// announced is handed out by ``pump(_:announcing:)`` alone: announcing
    /// it again would send the replicas to and fro.)
    private func pumpOrAnnounce(_ project: String) {
        pump(project, announcing: true)
    }

    /// Has each session of `project` here given what is waiting, up to its
    /// limit; `announcing`, the others told if it could not take all. The
    /// hand-out runs in a task of its own, so that no caller (a channel's
    /// request, the replicas' listener, the sweep) waits for it: under load
    /// it goes round again and again.
    private func pump(_ project: String, announcing: Bool = false) {
        if announcing { announceAfterPump.insert(project) }
        guard pumping.insert(project).inserted else {
            // The hand-out under way goes again, and announces for this caller too.
            pumpAgain.insert(project)
            return
        }
        Task { await handOutWhileAsked(project) }
    }

    private func handOutWhileAsked(_ project: String) async {
        var tookAll = true
        repeat {
            pumpAgain.remove(project)
            do {
                tookAll = try await handOut(project)
            } catch {
                logger.error("connection server storage failed: \(error)")
                tookAll = false
            }
        } while pumpAgain.contains(project)
        // Done before announcing: a pump asked for meanwhile runs by itself.
        pumping.remove(project)
        if announceAfterPump.remove(project) != nil, !tookAll { await announce(.waiting(project: project)) }
    }

    /// Claims what the project's sessions here have room for and gives it
    /// to them; returns whether it claimed all there was.
    private func handOut(_ project: String) async throws -> Bool {
        let open = sessions.values.filter { $0.project == project && !$0.draining }
        let room = open.reduce(0) { $0 + max(0, maxUnackedPerSession - $1.unacked.count) }
        guard room > 0 else { return false }
        let now = clock.nowMs
        let claim = ConnectionWrite.claim(project: project, replica: replica, nowMs: now, untilMs: now + leaseMs,
                                          graceMs: Self.ttlZeroGraceMs, limit: room)
        guard case .claimed(let receipts, let messages) = try await writer.enqueue(claim).result() else {
            throw GroupCommitMismatch()
        }
        var work: [(Flight, String)] = receipts.map { (.receipt($0.position, messageId: $0.messageId), $0.payload) }
        work += messages.map {
            (.upstream($0.position, device: $0.device, messageId: $0.messageId),
             CCSPayload.upstream(app: $0.app, from: $0.device, messageId: $0.messageId, data: $0.data))
        }
        var next = work.makeIterator()
        // The sessions may have changed while storage was claimed from.
        for session in sessions.values where session.project == project && !session.draining {
            var payloads: [String] = []
            while session.unacked.count < maxUnackedPerSession, let (flight, payload) = next.next() {
                session.unacked.insert(flight)
                payloads.append(payload)
            }
            if !payloads.isEmpty { session.output.yield(payloads) }
        }
        let unused = Array(IteratorSequence(next).map(\.0))
        if !unused.isEmpty { try await release(unused) }
        return work.count < room && unused.isEmpty
    }

    // MARK: Time

    /// Renews the claims of this replica's sessions when a third of the
    /// lease has passed, and then also looks for what is waiting for them
    /// (claims of a replica that died lapse; events missed); fails upstream
    /// messages whose time ran out before any application server acked
    /// them, drops downstream messages likewise, and forgets verdicts a
    /// device can no longer ask about.
    public func sweep() async {
        let now = clock.nowMs
        do {
            if now >= renewedAtMs + leaseMs / 3 {
                renewedAtMs = now
                let (upstream, receipts) = Self.positions(of: sessions.values.flatMap(\.unacked))
                // Claims a hand-out under way has made are not its sessions' yet: given up, they would be
                // claimed and handed out again, a second delivery. Queued as the claims are, so none slips
                // in between the positions' snapshot and the renewal.
                let renewal = ConnectionWrite.renewClaims(replica: replica, upstream: upstream, receipts: receipts, untilMs: now + leaseMs,
                                                          releasingOthers: pumping.isEmpty)
                _ = try await writer.enqueue(renewal).result()
                for project in Set(sessions.values.map(\.project)) { pump(project) }
            }
            for settled in try await storage.settleExpiredUpstream(nowMs: now, graceMs: Self.ttlZeroGraceMs, limit: 1000,
                                                                   verdict: Self.expiredVerdict) {
                let verdict = settled.verdict ?? Self.expiredVerdict(settled)
                await tellDevice(settled.device, .failed(ChannelFailure(app: settled.app, messageId: settled.messageId,
                                                                        error: verdict.code, description: verdict.text)))
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

    @Sendable private static func expiredVerdict(_ message: StoredUpstream) -> UpstreamVerdict {
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
