import Foundation
import Logging
import Synchronization

/// The matcher's events over a ``ReplicaBus``: each replica publishes its
/// events on the bus and applies every replica's, its own included, as the
/// bus delivers them, so all replicas' matchers see one order. The events a
/// replica's requests publish while its previous message is being sent go
/// together in the next (``GroupCommit``), packed into messages of up to the
/// bus's ``ReplicaBus/packedBytes`` (a JSON array of envelopes each): one
/// notification, and one wake-up of each replica, for many. When the bus
/// (re)joins, the matcher is brought in line with storage (events missed
/// meanwhile are lost; the sightings in them come back with the observers'
/// next reports).
///
/// Every event goes in messages the bus carries cheaply (a notification,
/// on PostgreSQL), so that nothing of it is stored a second time
/// (`replicaMessage`, outside every quota):
///
/// - A publication's content (up to 100 KiB) is in storage already, with the
///   device's quotas on it: an event that would not fit in one message goes
///   without its publications' contents, which each replica reads from
///   storage as it applies the event. A content changed again meanwhile is
///   read as it is then, and the later event changes nothing; one deleted
///   meanwhile is skipped, and the later delete removes it.
/// - An event still too long (a batch of many changes, a report of many
///   sightings) goes in parts, each applied after the other to the same
///   effect (``MatcherEvent/halves``); the publisher waits for the last.
final class ReplicatedMatcherFeed: MatcherFeed {
    /// How long a publisher waits for its own event to come back applied.
    static let echoTimeout = Duration.seconds(5)

    /// An event on the bus, with who published it: a publisher waits for its own.
    struct Envelope: Codable, Equatable {
        var replica: String
        var sequence: UInt64
        var event: MatcherEvent
        /// The publications of `event` whose content was left out, to be read from storage.
        var contentInStorage: [String]?

        /// `event` in envelopes (their sequence numbers still to be set)
        /// that each fit in a message of `maximumBytes`: without its
        /// publications' contents, then in parts, as far as that takes. A
        /// part that cannot be split further goes as it is.
        static func parts(of event: MatcherEvent, replica: String, maximumBytes: Int) throws -> [Envelope] {
            // Measured with the longest sequence number there is.
            func fits(_ envelope: Envelope) throws -> Bool {
                var measured = envelope
                measured.sequence = .max
                return try JSONEncoder().encode(measured).count <= maximumBytes
            }
            var envelope = Envelope(replica: replica, sequence: 0, event: event)
            guard try !fits(envelope) else { return [envelope] }
            if case .objects(let device, let changes) = event {
                var leftOut: [String] = []
                let light = changes.map { change -> ObjectChange in
                    guard case .putPublication(var publication) = change, !publication.content.isEmpty else { return change }
                    leftOut.append(publication.id)
                    publication.content = Data()
                    return .putPublication(publication)
                }
                if !leftOut.isEmpty {
                    envelope = Envelope(replica: replica, sequence: 0, event: .objects(device: device, changes: light),
                                        contentInStorage: leftOut)
                    if try fits(envelope) { return [envelope] }
                }
            }
            guard let (first, second) = envelope.event.halves else { return [envelope] }
            let split = try parts(of: first, replica: replica, maximumBytes: maximumBytes)
                + parts(of: second, replica: replica, maximumBytes: maximumBytes)
            guard let leftOut = envelope.contentInStorage.map(Set.init) else { return split }
            // Each part names the contents left out of its own publications.
            return split.map { part in
                var part = part
                if case .objects(_, let changes) = part.event {
                    let own = changes.compactMap { change -> String? in
                        guard case .putPublication(let publication) = change, leftOut.contains(publication.id) else { return nil }
                        return publication.id
                    }
                    part.contentInStorage = own.isEmpty ? nil : own
                }
                return part
            }
        }

        /// The envelope as sent.
        var encoded: String {
            get throws { String(decoding: try JSONEncoder().encode(self), as: UTF8.self) }
        }

        /// The event with the contents left out read back from storage
        /// (`content`); a publication storage no longer holds is left out.
        func event(readingContents content: (_ device: String, _ id: String) async throws -> Data?) async throws -> MatcherEvent {
            guard let leftOut = contentInStorage.map(Set.init), case .objects(let device, let changes) = event else { return event }
            var whole: [ObjectChange] = []
            for change in changes {
                guard case .putPublication(var publication) = change, leftOut.contains(publication.id) else {
                    whole.append(change)
                    continue
                }
                guard let stored = try await content(device, publication.id) else { continue }
                publication.content = stored
                whole.append(.putPublication(publication))
            }
            return .objects(device: device, changes: whole)
        }
    }

    /// Who waits for what to be applied. A class, so that the listening
    /// task holds it without holding the feed.
    private final class Waiters: Sendable {
        private struct State {
            var lastSequence: UInt64 = 0
            /// Publishers waiting for their events to be applied, by sequence.
            var events: [UInt64: AsyncStream<Void>.Continuation] = [:]
            /// ``start(bus:matcher:logger:timeout:reload:)``, until the first join is applied.
            var firstJoin: AsyncStream<Void>.Continuation?
            var listening = false
            /// Those waiting for the bus to join again, by a number of their own.
            var untilListening: [UInt64: AsyncStream<Void>.Continuation] = [:]
            var lastListeningWaiter: UInt64 = 0
        }

        private let state: Mutex<State>

        init(firstJoin: AsyncStream<Void>.Continuation) {
            state = Mutex(State(firstJoin: firstJoin))
        }

        /// A new sequence number, and what yields once the event of that number is applied.
        func waitForEvent() -> (UInt64, AsyncStream<Void>) {
            let (applied, continuation) = AsyncStream.makeStream(of: Void.self)
            let sequence = state.withLock { state in
                state.lastSequence += 1
                state.events[state.lastSequence] = continuation
                return state.lastSequence
            }
            return (sequence, applied)
        }

        func stopWaiting(_ sequence: UInt64) {
            state.withLock { $0.events.removeValue(forKey: sequence) }?.finish()
        }

        func eventApplied(_ sequence: UInt64) {
            Self.signal(state.withLock { $0.events.removeValue(forKey: sequence) })
        }

        /// The bus joined (again) and the matcher holds what storage does:
        /// publishers still waiting for events sent before will not see them
        /// come back (they were sent while the bus was away, or are lost with
        /// it), so they wait no longer.
        func joined(sentBefore last: UInt64) {
            let released = state.withLock { state in
                state.listening = true
                defer {
                    state.firstJoin = nil
                    state.untilListening = [:]
                }
                let sequences = state.events.keys.filter { $0 <= last }
                return [state.firstJoin] + sequences.map { state.events.removeValue(forKey: $0) } + state.untilListening.values.map { Optional($0) }
            }
            released.forEach(Self.signal)
        }

        func left() {
            state.withLock { $0.listening = false }
        }

        /// Nil while the bus listens; else what yields once it joins again.
        func waitForListening() -> AsyncStream<Void>? {
            let (joined, continuation) = AsyncStream.makeStream(of: Void.self)
            let number: UInt64? = state.withLock { state in
                guard !state.listening else { return nil }
                state.lastListeningWaiter += 1
                state.untilListening[state.lastListeningWaiter] = continuation
                return state.lastListeningWaiter
            }
            guard let number else { return nil }
            // A waiter that gives up (cancelled) is not kept until the next join.
            continuation.onTermination = { [weak self] _ in
                self?.state.withLock { _ = $0.untilListening.removeValue(forKey: number) }
            }
            return joined
        }

        /// The last sequence number handed out.
        var lastSequence: UInt64 { state.withLock { $0.lastSequence } }

        private static func signal(_ waiter: AsyncStream<Void>.Continuation?) {
            waiter?.yield()
            waiter?.finish()
        }
    }

    private let bus: any ReplicaBus
    private let matcher: Matcher
    private let logger: Logger
    private let waiters: Waiters
    /// Envelopes (JSON) waiting to be sent, packed, together.
    private let outbox: GroupCommit<String, Void>
    private let listening: Task<Void, Never>

    /// Starts listening on `bus`; `reload` reads what storage holds, for
    /// each join. Returns once the first join has been applied (the matcher
    /// holds what storage does), or throws when it is not within `timeout`.
    /// `content` reads a publication's content from storage, for the events
    /// that come without it.
    static func start(bus: any ReplicaBus, matcher: Matcher, logger: Logger, timeout: Duration = .seconds(30),
                      reload: @escaping @Sendable () async throws -> Matcher.Contents,
                      content: @escaping @Sendable (_ device: String, _ id: String) async throws -> Data?)
        async throws -> ReplicatedMatcherFeed {
        let (joined, continuation) = AsyncStream.makeStream(of: Void.self)
        let feed = ReplicatedMatcherFeed(bus: bus, matcher: matcher, logger: logger, firstJoin: continuation, reload: reload,
                                         content: content)
        let outcome = await FirstOutcome.race(within: timeout) {
            for await _ in joined { return }
        }
        if case .failure = outcome {
            feed.listening.cancel()
            throw ReplicationError(message: "the replicas' notifications could not be listened to within \(timeout)")
        }
        return feed
    }

    private init(bus: any ReplicaBus, matcher: Matcher, logger: Logger, firstJoin: AsyncStream<Void>.Continuation,
                 reload: @escaping @Sendable () async throws -> Matcher.Contents,
                 content: @escaping @Sendable (String, String) async throws -> Data?) {
        self.bus = bus
        self.matcher = matcher
        self.logger = logger
        outbox = GroupCommit { try await Self.send($0, on: bus) }
        let waiters = Waiters(firstJoin: firstJoin)
        self.waiters = waiters
        // The task holds what it uses, not the feed: the feed's deinit ends it.
        listening = Task {
            await bus.listen { delivery in
                try await Self.deliver(delivery, matcher: matcher, waiters: waiters, logger: logger, reload: reload,
                                       content: content)
            }
        }
    }

    deinit {
        listening.cancel()
    }

    func untilListening() async {
        guard let joined = waiters.waitForListening() else { return }
        for await _ in joined { return }
    }

    func publish(_ event: MatcherEvent) async throws {
        // Each part fitting alone in a message of the bus, its brackets aside.
        var parts = try Envelope.parts(of: event, replica: matcher.replica, maximumBytes: bus.packedBytes - 2)
        // Waiting before publishing: the event may come back before publish returns. The parts are applied in
        // order, so the last one's coming back is the whole event's.
        var waits: [(sequence: UInt64, applied: AsyncStream<Void>)] = []
        for index in parts.indices {
            let wait = waiters.waitForEvent()
            parts[index].sequence = wait.0
            waits.append(wait)
        }
        defer { for wait in waits { waiters.stopWaiting(wait.sequence) } }
        let sent = try parts.map { outbox.enqueue(try $0.encoded) }
        for part in sent { try await part.result() }
        let last = waits.last?.applied
        let outcome = await FirstOutcome.race(within: Self.echoTimeout) {
            guard let last else { return }
            for await _ in last { return }
        }
        if case .failure = outcome {
            // Sent, so other replicas apply it; this one catches up when its bus rejoins.
            logger.warning("an event sent to the replicas did not come back in time", metadata: ["timeout": "\(Self.echoTimeout)"])
        }
    }

    /// Sends envelopes in order, packed into as few messages as the bus
    /// carries cheaply (one alone when it is longer by itself); each
    /// envelope's outcome is its message's.
    static func send(_ envelopes: [String], on bus: any ReplicaBus) async throws -> [Result<Void, any Error>] {
        var results: [Result<Void, any Error>] = []
        var packed: [String] = []
        var bytes = 2
        func flush() async {
            guard !packed.isEmpty else { return }
            let outcome: Result<Void, any Error>
            do {
                try await bus.publish("[" + packed.joined(separator: ",") + "]")
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            results += Array(repeating: outcome, count: packed.count)
            packed = []
            bytes = 2
        }
        for envelope in envelopes {
            let length = envelope.utf8.count + 1
            if bytes + length > bus.packedBytes { await flush() }
            packed.append(envelope)
            bytes += length
        }
        await flush()
        return results
    }

    private static func deliver(_ delivery: ReplicaDelivery, matcher: Matcher, waiters: Waiters, logger: Logger,
                                reload: @Sendable () async throws -> Matcher.Contents,
                                content: @Sendable (String, String) async throws -> Data?) async throws {
        switch delivery {
        case .joined:
            let sentBefore = waiters.lastSequence
            await matcher.resync(try await reload())
            waiters.joined(sentBefore: sentBefore)
        case .left:
            waiters.left()
        case .message(let text):
            guard let envelopes = try? JSONDecoder().decode([Envelope].self, from: Data(text.utf8)) else {
                // An event this replica cannot apply is one its matcher misses: it reloads, as when it joins again.
                logger.warning("a message on the replica bus was not understood (a replica of another version?); reloading from the database",
                               metadata: ["bytes": "\(text.utf8.count)"])
                await matcher.resync(try await reload())
                return
            }
            var events: [MatcherEvent] = []
            for envelope in envelopes { events.append(try await envelope.event(readingContents: content)) }
            await matcher.apply(events)
            for envelope in envelopes where envelope.replica == matcher.replica { waiters.eventApplied(envelope.sequence) }
        }
    }
}

/// The replicas cannot be listened to.
struct ReplicationError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
