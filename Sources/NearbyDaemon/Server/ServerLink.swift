import DaemonCore
import DBus
import DequeModule
import Foundation
import Logging
import NearbyCore
import ServerAPI

/// Everything the daemon does with nearby-server for one ``Account`` (a user's
/// registration under one API key): the device
/// registration, the rotating token, keeping the server's publications and
/// subscriptions in step with the daemon's, reporting the tokens heard, and the
/// stream of found and lost. When the server is unreachable or restarts it
/// reconnects with backoff and restores all of it, without anyone asking. Each
/// session runs on one URL of ``ServerEndpoints``, the current one when it
/// began; a failed session moves on to the next URL with the registration it
/// had (valid on every replica).
///
/// It lives on the bus actor: the daemon hands it changes synchronously, which
/// costs a D-Bus call no thread hop; the requests themselves run off the actor.
/// Changes are queued and applied one at a time in order, so the server never
/// sees a removal overtake the creation it undoes, and a change undone before
/// its turn costs no request at all.
@BusActor
final class ServerLink {
    private enum Operation: Hashable {
        /// Bring the server's copy of this publication in line with ours.
        case publication(String)
        case subscription(String)
        case sightings
        case refreshToken

        var isChange: Bool {
            switch self {
            case .publication, .subscription: true
            case .sightings, .refreshToken: false
            }
        }
    }

    private struct StreamClosed: Error, CustomStringConvertible {
        var description: String { "the server closed the stream" }
    }

    let account: Account
    private let endpoints: ServerEndpoints
    /// The server of this session, or of the last one: the device's home
    /// once registered (``ServerEndpoints/client(for:on:)``).
    private var client: ServerClient
    /// The device of this session, or of the last one, once registered.
    private var sessionDevice: String?
    private let credentials: CredentialStore
    private let backoff: Backoff
    private let batchDelay: Duration
    private let refusedRetry: Duration
    /// Refused by the server, waiting for their next offer.
    private var refused: Set<Operation> = []
    /// Ids the server refused once: their later refusals are not warned of
    /// again. Nearly always empty, like ``restarted``: an id is removed from
    /// them only when they are not, since removing hashes it even from an
    /// empty set (looking one up does not).
    private var refusedBefore: Set<String> = []
    private var refusedRetryTask: Task<Void, Never>?
    /// The reason of the last failed attempt to connect, told once.
    private var lastFailure: String?
    private let logger: Logger
    /// Where the link's events go, in order.
    var onEvent: (LinkEvent) -> Void = { _ in }

    /// What the server should hold of a publication or subscription, and
    /// whether its change is queued in ``operations``.
    private struct Entry {
        /// Nil once the daemon took it back: in a session its removal is
        /// queued, and the entry goes when the removal is taken.
        var object: Wanted?
        /// Set when its change is queued; cleared when the change is taken,
        /// and at the start of a session, which empties the queue.
        var queued = false
    }

    /// Kept as the daemon's own objects: their request bodies are made only
    /// when they are sent.
    private enum Wanted {
        case publication(Publication)
        case subscription(Subscription)
    }

    /// By id, one entry for both what the server should hold and whether its
    /// change is queued: in a session, a Publish, its Unpublish and sending
    /// the change each look it up once here.
    private var entries: [String: Entry] = [:]
    /// Between the start of a session and its end: changes made meanwhile are
    /// queued; outside a session the next one's synchronisation covers them.
    private var inSession = false
    private var heard: [Sighting.Key: Sighting] = [:]
    private var pendingSeen: [Sighting.Key: Sighting] = [:]
    private var pendingGone: Set<Sighting.Key> = []
    /// Each with the time it was queued: a change waits `batchDelay` from then.
    private var operations: Deque<(operation: Operation, queuedAt: ContinuousClock.Instant)> = []
    /// The queued operations other than changes (their ``Entry`` says
    /// whether a change is queued): each is queued at most once.
    private var queued: Set<Operation> = []
    private var wakeUp: CheckedContinuation<Void, Never>?
    private var drained: [CheckedContinuation<Void, Never>] = []
    private var connected = false
    /// The publication and subscription ids the server holds: removing one it
    /// never had costs no request.
    private var onServer: Set<String> = []
    /// Held by the server, removed and then added again before the removal
    /// went out (an object paused and resumed): the server must see both, so
    /// that it reports the object's matches afresh.
    private var restarted: Set<String> = []
    /// An operation is on its way to the server.
    private var performing = false
    /// The earliest the next batch of changes is taken: under a steady stream
    /// of changes the link wakes every half `batchDelay` for all that came due
    /// meanwhile. Waking as each change came due cost a timer and two thread
    /// hops per change: a seventh of nearbyd's CPU under `nearby-bench dbus`.
    /// The pause is a ``BusTimer``, on the bus thread: even once a round, a
    /// `Task.sleep`'s hops to a dispatch thread and back cost a few percent.
    private var nextRound = ContinuousClock.now
    private let roundGap: Duration
    private var token: IssuedToken?
    /// Against which the token's refresh and expiry times are read.
    private let clock: any WallClock

    init(account: Account, endpoints: ServerEndpoints, credentials: CredentialStore, backoff: Backoff, batchDelay: Duration,
         refusedRetry: Duration, clock: any WallClock, logger: Logger) {
        self.account = account
        self.clock = clock
        self.refusedRetry = refusedRetry
        self.endpoints = endpoints
        client = endpoints.clients[0]
        self.credentials = credentials
        self.backoff = backoff
        self.batchDelay = batchDelay
        roundGap = batchDelay / 2
        self.logger = logger
    }

    // MARK: What the daemon asks for

    /// Takes a change; it reaches the server in turn.
    func send(_ command: LinkCommand) {
        switch command {
        case .publish(let publication):
            change(publication.id, to: .publication(publication), .publication(publication.id))
        case .unpublish(let id):
            change(id, to: nil, .publication(id))
        case .subscribe(let subscription):
            change(subscription.id, to: .subscription(subscription), .subscription(subscription.id))
        case .unsubscribe(let id):
            change(id, to: nil, .subscription(id))
        case .seen(let sightings):
            for sighting in sightings {
                heard[sighting.key] = sighting
                pendingSeen[sighting.key] = sighting
                pendingGone.remove(sighting.key)
            }
            enqueue(.sightings)
        case .gone(let keys):
            for key in keys where heard.removeValue(forKey: key) != nil {
                pendingSeen.removeValue(forKey: key)
                pendingGone.insert(key)
            }
            enqueue(.sightings)
        }
    }

    /// The server should hold `object` under `id`, or (nil) no longer; the
    /// change is queued unless it is already.
    private func change(_ id: String, to object: Wanted?, _ operation: Operation) {
        let (wanted, queue, idle) = Self.update(&entries[id, default: Entry()], to: object, inSession: inSession)
        if object == nil {
            // Taken back after the server took it: if it is wanted again before the removal goes out, the server must see both.
            if wanted, onServer.contains(id) { restarted.insert(id) }
            if !refusedBefore.isEmpty { refusedBefore.remove(id) }
            // Nothing holds or queues it (outside a session): the next one's synchronisation removes it from the server.
            if idle { entries.removeValue(forKey: id) }
        }
        if queue { queueOperation(operation) }
    }

    /// Returns whether the entry held an object before, whether its change
    /// is to be queued now, and whether it is left with neither an object
    /// nor a queued change.
    private static func update(_ entry: inout Entry, to object: Wanted?,
                               inSession: Bool) -> (wanted: Bool, queue: Bool, idle: Bool) {
        let wanted = entry.object != nil
        entry.object = object
        guard inSession, !entry.queued else { return (wanted, false, object == nil && !entry.queued) }
        entry.queued = true
        return (wanted, true, false)
    }

    /// Waits until every change sent so far has reached the server, or the link
    /// is disconnected (then the next connection brings the server in step).
    func drain() async {
        guard connected, performing || !operations.isEmpty else { return }
        await withCheckedContinuation { drained.append($0) }
    }

    // MARK: The connection

    /// Keeps connected to the server until the task is cancelled.
    func run() async {
        var failure: (any Error)?
        await backoff.retry(over: endpoints) { endpoint in
            failure = nil
            var moves = 0
            while true {
                client = endpoint.client
                do {
                    try await session(endpoint)
                } catch ServerCallError.moved(let base) where moves < ServerEndpoints.maxMoves && !connected {
                    // Another replica serves the device: a new session there, at once.
                    moves += 1
                    if let sessionDevice { await endpoints.moved(sessionDevice, to: base, from: client) }
                    continue
                } catch {
                    failure = error
                    // The device's home failed: the list's URL sends it on to the one serving it now, at once.
                    if let sessionDevice, ServerEndpoints.isServerFailure(error), client.baseURL != endpoint.client.baseURL,
                       await endpoints.homeFailed(sessionDevice), !connected, moves < ServerEndpoints.maxMoves {
                        moves += 1
                        continue
                    }
                }
                break
            }
            return Backoff.Attempt(connected: connected, failure: failure)
        } settled: { roundFailed in
            // Told only when no URL is left to try at once: a move to the next is no news.
            if roundFailed, let failure { await failed(failure) }
            disconnect()
        } pause: { delay in
            await pause(delay)
        }
        disconnect()
        refusedRetryTask?.cancel()
    }

    /// A round of attempts failed: the daemon hears why, and the log says so,
    /// once per reason. With several URLs, why each failed.
    private func failed(_ error: any Error) async {
        guard !Task.isCancelled else { return }
        var reason = switch error {
        case ServerCallError.keyRefused(let message): "nearby-server refuses the API key: \(message)"
        case ServerCallError.unreachable(let message): "cannot reach nearby-server at \(client.baseURL): \(message)"
        default: "lost nearby-server: \(NetworkErrors.explain(error) ?? "\(error)")"
        }
        if endpoints.clients.count > 1, ServerEndpoints.isServerFailure(error) {
            reason = "cannot reach nearby-server: \(await endpoints.failureSummary)"
        }
        guard reason != lastFailure else { return }
        lastFailure = reason
        logger.warning("nearby-server link: \(reason)", metadata: ["server": "\(client.baseURL)", "account": "\(account)"])
        let reached = if case ServerCallError.keyRefused = error { true } else { false }
        notify(.waiting(reason, reached: reached))
    }

    private func session(_ endpoint: ServerEndpoints.Endpoint) async throws {
        let device = try await registration()
        sessionDevice = device.device
        client = await endpoints.client(for: device.device, on: endpoint)
        operations.removeAll()
        queued.removeAll()
        // Nothing is queued any more: what was taken back is for the synchronisation to remove.
        entries = entries.compactMapValues { $0.object.map { Entry(object: $0) } }
        inSession = true
        defer { inSession = false }
        pendingSeen = heard
        pendingGone.removeAll()
        // A token that is still good is kept, so devices hearing it hear no change.
        if (token?.refreshAtMs).map({ $0 <= clock.nowMs }) ?? true {
            try await refreshToken(device)
        }
        let (requests, outgoing) = AsyncStream.makeStream(of: StreamRequest.self)
        defer { outgoing.finish() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            let (opened, openedSignal) = AsyncStream.makeStream(of: Void.self)
            group.addTask { try await self.stream(device, requests: requests, opened: openedSignal) }
            var isOpen = false
            for await _ in opened {
                isOpen = true
                break
            }
            guard isOpen else {
                try await group.next()
                throw StreamClosed()
            }
            let registered = try await synchronize(device)
            onServer = registered
            // The snapshot below reports every match afresh.
            restarted.removeAll()
            connected = true
            lastFailure = nil
            await endpoints.succeeded(endpoint)
            logger.info("connected to nearby-server", metadata: ["server": "\(client.baseURL)", "device": "\(device.device)"])
            notify(.connected(namespace: device.namespace, registered: registered, server: client.baseURL))
            try await flushSightings(device)
            // After the resync and the re-reported sightings: what was lost meanwhile drops out.
            outgoing.yield(.snapshot)
            group.addTask { try await self.work(device) }
            group.addTask { try await self.refreshTokenWhenDue() }
            try await group.next()
            throw StreamClosed()
        }
    }

    private func disconnect() {
        let wasConnected = connected
        connected = false
        for waiter in drained { waiter.resume() }
        drained.removeAll()
        if wasConnected { notify(.disconnected) }
    }

    /// Waits out the backoff; drops the token if it expires meanwhile.
    private func pause(_ delay: Duration) async {
        if let token {
            let remaining = Int64(clamping: token.expiresAtMs) - Int64(clamping: clock.nowMs)
            if remaining <= 0 {
                self.token = nil
                notify(.token(nil))
            } else if .milliseconds(remaining) < delay {
                try? await Task.sleep(for: .milliseconds(remaining))
                return await pause(delay - .milliseconds(remaining))
            }
        }
        try? await Task.sleep(for: delay)
    }

    private func registration() async throws -> DeviceRegistration {
        try await credentials.registration(account, with: client)
    }

    /// Runs `body`; a refused credential is forgotten, so the next connection registers afresh.
    private func authenticated<T>(_ device: DeviceRegistration,
                                  _ body: () async throws(ServerCallError) -> T) async throws -> T {
        do {
            return try await body()
        } catch .unauthenticated(let message) {
            await forget(device, message)
            throw ServerCallError.unauthenticated(message)
        }
    }

    /// The server refused the device's credential: the next session registers afresh.
    private func forget(_ device: DeviceRegistration, _ message: String) async {
        logger.warning("the server no longer knows this device (\(message)); registering again")
        await credentials.forget(device, account: account)
        token = nil
    }

    private func refreshToken(_ device: DeviceRegistration) async throws {
        let issued = try await authenticated(device) { () async throws(ServerCallError) in try await client.issueToken(device) }
        token = issued
        notify(.token(issued.token))
    }

    private func refreshTokenWhenDue() async throws {
        while true {
            let due = Int64(clamping: token?.refreshAtMs ?? 0) - Int64(clamping: clock.nowMs)
            try await Task.sleep(for: .milliseconds(max(due, 1000)))
            enqueue(.refreshToken)
        }
    }

    /// Removes from the server what the daemon no longer has and adds what it lacks.
    private func synchronize(_ device: DeviceRegistration) async throws -> Set<String> {
        let heldPublications = try await authenticated(device) { () async throws(ServerCallError) in
            try await client.publications(device)
        }
        let heldSubscriptions = try await authenticated(device) { () async throws(ServerCallError) in
            try await client.subscriptions(device)
        }
        var publications: [String: Publication] = [:]
        var subscriptions: [String: Subscription] = [:]
        for (id, entry) in entries {
            switch entry.object {
            case .publication(let publication): publications[id] = publication
            case .subscription(let subscription): subscriptions[id] = subscription
            case nil: break
            }
        }
        var registered = Set(heldPublications.map(\.id)).intersection(publications.keys)
            .union(Set(heldSubscriptions.map(\.id)).intersection(subscriptions.keys))
        var changes: [ChangeBatch.Change] = []
        changes += heldPublications.filter { publications[$0.id] == nil }.map { .deletePublication(id: $0.id) }
        changes += heldSubscriptions.filter { subscriptions[$0.id] == nil }.map { .deleteSubscription(id: $0.id) }
        // In the order they were made (ids end in a counter), so that what the
        // server's limits refuse is the newest.
        changes += publications.filter { !registered.contains($0.key) }.sorted { Self.madeBefore($0.key, $1.key) }
            .map { .putPublication(id: $0.key, Self.spec(of: $0.value)) }
        changes += subscriptions.filter { !registered.contains($0.key) }.sorted { Self.madeBefore($0.key, $1.key) }
            .map { .putSubscription(id: $0.key, Self.spec(of: $0.value)) }
        for change in try await send(changes, device) where change.isPut {
            registered.insert(change.id)
        }
        return registered
    }

    /// Sends `changes` in as few requests as the server's size limits allow;
    /// returns those the server took. What it refused is told to the daemon,
    /// and offered again later when the server may take it then (its limits).
    private func send(_ changes: [ChangeBatch.Change], _ device: DeviceRegistration) async throws -> [ChangeBatch.Change] {
        var taken: [ChangeBatch.Change] = []
        var start = changes.startIndex
        while start < changes.endIndex {
            var end = start
            var bytes = 0
            while end < changes.endIndex, end - start < ClientBatchLimits.maxChangesPerBatch {
                bytes += Self.estimatedBytes(changes[end])
                if end > start, bytes > ClientBatchLimits.maxChangeBatchBytes { break }
                end += 1
            }
            let batch = ChangeBatch(changes: Array(changes[start..<end]))
            let answer = try await authenticated(device) { () async throws(ServerCallError) in try await client.apply(batch, device) }
            for (index, change) in batch.changes.enumerated() {
                if let error = index < answer.results.count ? answer.results[index].error : nil {
                    refusedByServer(change, error)
                } else {
                    taken.append(change)
                }
            }
            start = end
        }
        return taken
    }

    /// Whether the object `a` was made before `b`: the registry's ids are a
    /// run's prefix and a counter, so the shorter is older, then the lesser.
    private nonisolated static func madeBefore(_ a: String, _ b: String) -> Bool {
        (a.count, a) < (b.count, b)
    }

    /// A put the server refused: limits it may have room under later
    /// (`limit_exceeded`, or its own trouble) are offered again after
    /// `refusedRetry`; the rest (the object itself is wrong) are not.
    private func refusedByServer(_ change: ChangeBatch.Change, _ error: APIError) {
        let retried = change.isPut && [.limitExceeded, .internalError].contains(error.error)
        // Said once at warning; its retries refused again are debug, or a full quota would fill the journal.
        let level: Logger.Level = refusedBefore.insert(change.id).inserted ? .warning : .debug
        logger.log(level: level, "nearby-server refused \(change.id): \(error)\(retried ? "; offering it again in \(refusedRetry)" : "")",
                   metadata: ["account": "\(account)"])
        notify(.refused(change.id, error, retried: retried))
        guard retried else { return }
        if case .putPublication(let id, _) = change { refused.insert(.publication(id)) }
        if case .putSubscription(let id, _) = change { refused.insert(.subscription(id)) }
        guard refusedRetryTask == nil else { return }
        refusedRetryTask = Task { [refusedRetry] in
            try? await Task.sleep(for: refusedRetry)
            guard !Task.isCancelled else { return }
            self.offerRefusedAgain()
        }
    }

    /// Queues the refused objects still wanted; outside a session the next one's synchronisation offers them.
    private func offerRefusedAgain() {
        refusedRetryTask = nil
        let due = refused
        refused.removeAll()
        for operation in due {
            switch operation {
            case .publication(let id), .subscription(let id): enqueueChange(id, operation)
            case .sightings, .refreshToken: break
            }
        }
    }

    private nonisolated static func estimatedBytes(_ change: ChangeBatch.Change) -> Int {
        if case .putPublication(_, let spec) = change { return spec.content.count * 4 / 3 + 512 }
        return 256
    }

    // MARK: Applying changes

    /// Queues an operation other than a change, once.
    private func enqueue(_ operation: Operation) {
        guard inSession, queued.insert(operation).inserted else { return }
        queueOperation(operation)
    }

    /// Queues the change of an object still wanted, once.
    private func enqueueChange(_ id: String, _ operation: Operation) {
        guard inSession, let index = entries.index(forKey: id), entries.values[index].object != nil,
              !entries.values[index].queued else { return }
        entries.values[index].queued = true
        queueOperation(operation)
    }

    private func queueOperation(_ operation: Operation) {
        operations.append((operation, .now))
        wakeUp?.resume()
        wakeUp = nil
    }

    private func work(_ device: DeviceRegistration) async throws {
        while true {
            try await waitForOperations()
            performing = true
            defer { performing = false }
            // A change goes out `batchDelay` after it was made at the earliest: one undone sooner costs nothing.
            if let head = operations.first, head.operation.isChange {
                let wait = max(head.queuedAt + batchDelay, nextRound) - .now
                if wait > .zero { try await BusTimer.sleep(for: wait) }
            }
            let changes = takeChanges(madeBy: .now - batchDelay)
            nextRound = .now + roundGap
            if !changes.isEmpty {
                try await apply(changes, device)
            } else if let head = operations.first, !head.operation.isChange {
                // Changes undone before their turn leave nothing to send; what is left is not a change.
                operations.removeFirst()
                queued.remove(head.operation)
                try await perform(head.operation, device)
            }
            if operations.isEmpty {
                for waiter in drained { waiter.resume() }
                drained.removeAll()
            }
        }
    }

    /// The publication and subscription changes at the head of the queue made
    /// by `cutoff`, as one batch: everything that piled up while the last
    /// request was on its way.
    private func takeChanges(madeBy cutoff: ContinuousClock.Instant) -> [ChangeBatch.Change] {
        var changes: [ChangeBatch.Change] = []
        var bytes = 0
        while let (operation, queuedAt) = operations.first, queuedAt <= cutoff, changes.count < ClientBatchLimits.maxChangesPerBatch - 1 {
            var taken: [ChangeBatch.Change] = []
            let id: String
            let isPublication: Bool
            switch operation {
            case .publication(let objectID): (id, isPublication) = (objectID, true)
            case .subscription(let objectID): (id, isPublication) = (objectID, false)
            case .sightings, .refreshToken: return changes
            }
            // Every queued change has its entry; once the change is taken, the
            // entry of an object taken back goes, and that of one still wanted is no longer queued.
            let index = entries.index(forKey: id)
            switch index.flatMap({ entries.values[$0].object }) {
            case .publication(let publication):
                if restarted.contains(id) { taken.append(.deletePublication(id: id)) }
                taken.append(.putPublication(id: id, Self.spec(of: publication)))
            case .subscription(let subscription):
                if restarted.contains(id) { taken.append(.deleteSubscription(id: id)) }
                taken.append(.putSubscription(id: id, Self.spec(of: subscription)))
            case nil where onServer.contains(id):
                taken.append(isPublication ? .deletePublication(id: id) : .deleteSubscription(id: id))
            case nil:
                break
            }
            if !taken.isEmpty {
                for change in taken { bytes += Self.estimatedBytes(change) }
                if !changes.isEmpty, bytes > ClientBatchLimits.maxChangeBatchBytes { break }
                for change in taken where !change.isPut { onServer.remove(change.id) }
                if !restarted.isEmpty { restarted.remove(taken[0].id) }
                changes += taken
            }
            operations.removeFirst()
            if let index {
                if entries.values[index].object == nil { entries.remove(at: index) } else { entries.values[index].queued = false }
            }
        }
        return changes
    }

    /// Sends changes; what the server took is held there from now on (a removal
    /// queued meanwhile then deletes it), what it refused is logged and stays starting.
    private func apply(_ changes: [ChangeBatch.Change], _ device: DeviceRegistration) async throws {
        for change in try await send(changes, device) where change.isPut {
            onServer.insert(change.id)
            if !refusedBefore.isEmpty { refusedBefore.remove(change.id) }
            notify(.registered(change.id))
        }
    }

    private func waitForOperations() async throws {
        while operations.isEmpty {
            try Task.checkCancellation()
            await withTaskCancellationHandler {
                await withCheckedContinuation { wakeUp = $0 }
            } onCancel: {
                Task { @BusActor in self.cancelWait() }
            }
        }
    }

    private func cancelWait() {
        wakeUp?.resume()
        wakeUp = nil
    }

    private func perform(_ operation: Operation, _ device: DeviceRegistration) async throws {
        switch operation {
        case .sightings:
            try await flushSightings(device)
        case .refreshToken:
            try await refreshToken(device)
        case .publication, .subscription:
            // Taken by takeChanges() in batches.
            break
        }
    }

    /// Sends what was heard and lost since the last report, in reports the server accepts.
    private func flushSightings(_ device: DeviceRegistration) async throws {
        while !pendingSeen.isEmpty || !pendingGone.isEmpty {
            let seen = Array(pendingSeen.values.prefix(ClientBatchLimits.maxSightingsPerReport))
            let gone = Array(pendingGone.prefix(ClientBatchLimits.maxSightingsPerReport - seen.count))
            for sighting in seen { pendingSeen.removeValue(forKey: sighting.key) }
            for key in gone { pendingGone.remove(key) }
            let report = SightingReport(
                seen: seen.map {
                    .init(token: $0.token, medium: $0.medium, rssi: $0.rssi, distance: $0.distanceMeters,
                          seenAtMs: $0.seenAtMilliseconds)
                },
                gone: gone.map { .init(token: $0.token, medium: $0.medium) })
            _ = try await authenticated(device) { () async throws(ServerCallError) in try await client.report(report, device) }
        }
    }

    // MARK: The stream

    private static func spec(of publication: Publication) -> PublicationSpec {
        let message = publication.message
        return PublicationSpec(namespace: message.namespace, type: message.type, content: Data(message.content),
                               mediums: publication.strategy.mediums.sorted(), mode: publication.strategy.mode,
                               expiresAtMs: publication.expiresAtMs, distance: wire(publication.strategy.distance))
    }

    private static func spec(of subscription: Subscription) -> SubscriptionSpec {
        SubscriptionSpec(namespace: subscription.filter.namespace, type: subscription.filter.type,
                         mediums: subscription.strategy.mediums.sorted(), mode: subscription.strategy.mode,
                         expiresAtMs: subscription.expiresAtMs, distance: wire(subscription.strategy.distance))
    }

    /// The default distance is left out, as servers before earshot expect.
    private static func wire(_ distance: DistanceType) -> DistanceType? {
        distance == .default ? nil : distance
    }

    private func notify(_ event: LinkEvent) {
        onEvent(event)
    }

    private func stream(_ device: DeviceRegistration, requests: AsyncStream<StreamRequest>,
                        opened: AsyncStream<Void>.Continuation) async throws {
        defer { opened.finish() }
        let logger = self.logger
        do {
            try await DeviceSocket.run(server: client, path: APIPath.stream(device.device), device: device,
                                       maxFrameBytes: ClientBatchLimits.maxStreamMessageBytes, requests: requests,
                                       logger: logger) {
                opened.yield()
            } received: { text in
                do {
                    await self.notify(.stream(try JSONDecoder().decode(StreamEvent.self, from: Data(text.utf8))))
                } catch {
                    logger.warning("ignoring a malformed stream event: \(error)")
                }
            }
        } catch ServerCallError.unauthenticated(let message) {
            await forget(device, message)
            throw ServerCallError.unauthenticated(message)
        }
    }

}

extension ChangeBatch.Change {
    /// A put rather than a delete.
    var isPut: Bool {
        switch self {
        case .putPublication, .putSubscription: true
        case .deletePublication, .deleteSubscription: false
        }
    }
}
