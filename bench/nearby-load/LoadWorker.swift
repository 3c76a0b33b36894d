import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOPosix
import NearbyCore
import ServerAPI
import Synchronization

/// One process of the generator of `nearby-bench server`: simulated devices
/// that speak nearby-server's device API directly, as a device's own Nearby
/// stack would (see NearbyLoad.swift for the commands that drive it).
final class LoadWorker: Sendable {
    struct Options: Sendable {
        var urls: [String]
        var key: String
        var process: Int
        var devices: Int
        var idle: Int
        var neighbours: Int
        var perAddress: Int
        var to: String
        var setupConcurrency: Int
        var seed: Int
    }

    /// What a run of requests keeps while it goes.
    private struct Run {
        var tally = Counts()
        /// Latencies of the answers (ms), taken in an open-loop run only.
        var latencies: [Double]?
        var stopping = false
    }

    /// The upstream messages of one process: out, settled, and the latencies of those settled while measuring.
    private struct Upstream {
        var sending = false
        var out = 0
        var done = 0
        var target = 0
        var measuring = false
        var latencies: [Double] = []
        var outcomes = Counts()
    }

    private struct State {
        var devices: [DeviceState]
        var urls: [String]
        var nextURL = 0
        /// Another server that "health" asks instead, for a floor.
        var floorURL: String?
        var counts = Counts()
        var streamEvents = Counts()
        var measuring = false
        var foundLatencies: [Double] = []
        var run = Run()
        var upstream = Upstream()

        /// The next server, round robin: requests spread as a load balancer without stickiness would.
        mutating func url() -> String {
            nextURL = (nextURL + 1) % urls.count
            return urls[nextURL]
        }
    }

    static let type = "bench"

    let options: Options
    private let group: MultiThreadedEventLoopGroup
    /// Requests go from an address of the process's own (127.W.255.1), apart from the devices' streams.
    private let requests: HTTPPool
    private let state: Mutex<State>
    private let emit: @Sendable (String) -> Void

    init(_ options: Options, group: MultiThreadedEventLoopGroup, emit: @escaping @Sendable (String) -> Void) {
        self.options = options
        self.group = group
        self.emit = emit
        requests = HTTPPool(group: group, from: "127.\(options.process + 1).255.1", limit: 128)
        let devices = (0..<(options.devices + options.idle)).map { DeviceState(index: $0, seed: options.seed) }
        state = Mutex(State(devices: devices, urls: options.urls))
    }

    // MARK: Commands

    /// The result of one command from the benchmark, as a JSON object.
    func handle(_ action: String, _ command: [String: Any]) async -> [String: Any] {
        switch action {
        case "setup": return await setup()
        case "open": return await open(within: command.double("within") ?? 120)
        case "close":
            await closeStreams()
            return ["open": openCount()]
        case "held": return held()
        case "urls":
            await rehome(urls: command["urls"] as? [String] ?? [])
            return [:]
        case "run": return await run(command)
        case "channels": return await channels(count: command.int("count") ?? 0, within: command.double("within") ?? 120)
        case "close-channels":
            await closeChannels()
            return ["open": openChannels().count]
        case "upstream-start":
            return await upstreamStart(inFlight: command.int("in_flight") ?? 1, warmUp: command.double("warmup") ?? 0,
                                       within: command.double("within") ?? 120)
        case "upstream-window": return await upstreamWindow(id: command.int("id") ?? 0, seconds: command.double("seconds") ?? 10)
        case "upstream-stop": return await upstreamStop(within: command.double("within") ?? 120)
        default: return ["error": "unknown command \(action)"]
        }
    }

    // MARK: Setup

    private func setup() async -> [String: Any] {
        let start = ContinuousClock.now
        let everyone = Array(0..<(options.devices + options.idle))
        let lanes = options.setupConcurrency
        let failed = await withTaskGroup(of: Int.self) { group in
            for lane in 0..<lanes {
                group.addTask {
                    var failed = 0
                    for index in stride(from: lane, to: everyone.count, by: lanes) {
                        do {
                            if try await !self.register(index, moving: index < self.options.devices) { failed += 1 }
                        } catch {
                            self.count("setup \(Self.name(of: error))")
                            failed += 1
                        }
                    }
                    return failed
                }
            }
            return await group.reduce(0, +)
        }
        return state.withLock { state in
            ["counts": state.counts.values, "failed": failed, "seconds": seconds(since: start),
             "device": state.devices.lazy.compactMap(\.id).first as Any]
        }
    }

    /// Registers the device, finds its home and, for a moving device, takes a
    /// token, publishes p0 and subscribes s0; false when the server refused a step.
    private func register(_ index: Int, moving: Bool) async throws -> Bool {
        let base = state.withLock { $0.url() }
        let answer = try await requests.request(base, .POST, APIPath.devices, headers: [(apiKeyHeader, options.key)])
        count("register \(answer.status)")
        guard answer.status == 201 else { return false }
        let registration = try JSONDecoder().decode(DeviceRegistration.self, from: answer.body)
        state.withLock { state in
            state.devices[index].id = registration.device
            state.devices[index].secret = registration.secret
        }
        try await findHome(index, base)
        guard moving else { return true }
        let (home, authorization) = state.withLock { ($0.devices[index].home ?? base, $0.devices[index].authorization) }
        let issued = try await requests.request(home, .POST, APIPath.tokens(registration.device), headers: [authorization])
        count("token \(issued.status)")
        guard issued.status == 201 else { return false }
        let token = try JSONDecoder().decode(IssuedToken.self, from: issued.body).token
        state.withLock { $0.devices[index].token = token }
        // The content names the publisher, so that a found says which report made it.
        var content = Data("\(options.process):\(index):".utf8)
        content.append(contentsOf: repeatElement(UInt8(ascii: "."), count: max(0, 64 - content.count)))
        let publication = PublicationSpec(namespace: "", type: Self.type, content: content, mediums: [.ble], mode: .broadcast,
                                          expiresAtMs: nowMs() + 7_200_000)
        let subscription = SubscriptionSpec(namespace: "", type: Self.type, mediums: [.ble], mode: .scan, expiresAtMs: 0)
        let published = try await requests.request(home, .PUT, APIPath.publication(registration.device, "p0"),
                                                    headers: [authorization], body: try json(publication))
        count("publications \(published.status)")
        let subscribed = try await requests.request(home, .PUT, APIPath.subscription(registration.device, "s0"),
                                                    headers: [authorization], body: try json(subscription))
        count("subscriptions \(subscribed.status)")
        return published.status == 200 && subscribed.status == 200
    }

    /// The replica that serves the device: the others answer its requests 307
    /// to it, as nearbyd finds it. Its requests and its stream go there from then on.
    private func findHome(_ index: Int, _ base: String) async throws {
        let (id, authorization) = state.withLock { ($0.devices[index].id ?? "", $0.devices[index].authorization) }
        let answer = try await requests.request(base, .GET, APIPath.publications(id), headers: [authorization])
        count("home \(answer.status)")
        var home = base
        if answer.status == 307, let location = answer.headers.first(name: "Location"), let path = location.range(of: "/v1/") {
            home = String(location[..<path.lowerBound])
        }
        state.withLock { $0.devices[index].home = home }
    }

    private func rehome(urls: [String]) async {
        guard !urls.isEmpty else { return }
        let registered = state.withLock { state in
            state.urls = urls
            state.nextURL = 0
            return state.devices.filter { $0.id != nil }.map(\.index)
        }
        await withTaskGroup(of: Void.self) { group in
            for lane in 0..<64 {
                group.addTask {
                    for position in stride(from: lane, to: registered.count, by: 64) {
                        let base = self.state.withLock { $0.url() }
                        do {
                            try await self.findHome(registered[position], base)
                        } catch {
                            self.count("home \(Self.name(of: error))")
                        }
                    }
                }
            }
        }
    }

    // MARK: Streams

    /// The source address of the device's stream and channel: its group's
    /// (127.W.x.y, `perAddress` devices each, below the server's default
    /// `max-connections-per-address`), as devices behind different addresses.
    private func address(of index: Int) -> String {
        let group = index / options.perAddress
        return "127.\(options.process + 1).\(group / 250).\(group % 250 + 1)"
    }

    /// Opens the device's WebSocket `what` (stream, channel) at its home, or nil, counted in `outcomes`.
    private func connect(_ index: Int, _ what: String, outcomes: SharedCounts,
                         received: @escaping @Sendable (ByteBuffer) -> Void,
                         ended: @escaping @Sendable (Int) -> Void) async -> WebSocketConnection? {
        let (id, secret, home) = state.withLock { ($0.devices[index].id, $0.devices[index].secret, $0.devices[index].home) }
        guard let id, let secret, let home else { return nil }
        do {
            let endpoint = try HTTPPool.endpoint(home)
            return try await WebSocketConnection.connect(group, host: endpoint.host, port: endpoint.port,
                                                         path: "/v1/devices/\(id)/\(what)", secret: secret,
                                                         from: address(of: index), received: received, ended: ended)
        } catch WebSocketConnection.Failure.refused {
            outcomes.add("refused")
        } catch {
            outcomes.add("failed \(Self.name(of: error))")
        }
        return nil
    }

    private func open(within seconds: Double) async -> [String: Any] {
        let start = ContinuousClock.now
        let outcomes = SharedCounts()
        let closed = state.withLock { $0.devices.filter { $0.id != nil && !$0.streamIsOpen }.map(\.index) }
        await inLanes(closed, until: start + .seconds(seconds), outcomes: outcomes) { index in
            await self.openStream(index, outcomes: outcomes)
        }
        return ["outcomes": outcomes.values, "open": openCount(), "seconds": self.seconds(since: start)]
    }

    /// Runs `body` for each of `indices`, `--setup-concurrency` at once, until
    /// `deadline`: a lane that finds it passed stops, counted in `outcomes` as timed out.
    private func inLanes(_ indices: [Int], until deadline: ContinuousClock.Instant, outcomes: SharedCounts,
                         _ body: @escaping @Sendable (Int) async -> Void) async {
        let lanes = options.setupConcurrency
        await withTaskGroup(of: Void.self) { group in
            for lane in 0..<lanes {
                group.addTask {
                    for position in stride(from: lane, to: indices.count, by: lanes) {
                        guard ContinuousClock.now < deadline else {
                            outcomes.add("timed out")
                            return
                        }
                        await body(indices[position])
                    }
                }
            }
        }
    }

    private func openStream(_ index: Int, outcomes: SharedCounts) async {
        let stream = await connect(index, "stream", outcomes: outcomes,
                                   received: { [self] frame in streamEvent(index, frame) },
                                   ended: { [self] code in streamEnded(index, code) })
        guard let stream else { return }
        state.withLock { state in
            state.devices[index].stream = stream
            state.devices[index].streamClosed = nil
        }
        outcomes.add("opened")
    }

    /// One event of a device's stream: counted; a found's latency taken while measuring.
    private func streamEvent(_ index: Int, _ frame: ByteBuffer) {
        let event = try? JSONDecoder().decode(StreamEvent.self, from: frame)
        let arrived = ContinuousClock.now
        state.withLock { state in
            switch event {
            case .found(let match):
                state.streamEvents.add("found")
                // The content is "process:index:…": the publisher the report that made it added.
                let parts = match.content.split(separator: UInt8(ascii: ":"), maxSplits: 2)
                guard parts.count > 2, let publisher = Int(String(decoding: parts[1], as: UTF8.self)),
                      let sent = state.devices[index].pending.removeValue(forKey: publisher) else { return }
                state.foundLatencies.append(milliseconds(arrived - sent))
            case .lost: state.streamEvents.add("lost")
            case .snapshot: state.streamEvents.add("snapshot")
            case nil: state.streamEvents.add("?")
            }
        }
    }

    private func streamEnded(_ index: Int, _ code: Int) {
        state.withLock { state in
            state.devices[index].streamClosed = code
            state.streamEvents.add("closed \(code)")
        }
    }

    private func openCount() -> Int {
        state.withLock { $0.devices.lazy.filter(\.streamIsOpen).count }
    }

    private func held() -> [String: Any] {
        state.withLock { state in
            var closed = Counts()
            var byURL = Counts()
            for device in state.devices where device.stream != nil {
                if let code = device.streamClosed { closed.add("\(code)") } else { byURL.add(device.home ?? "?") }
            }
            return ["open": state.devices.lazy.filter(\.streamIsOpen).count, "closed": closed.values, "by_url": byURL.values]
        }
    }

    private func closeStreams() async {
        let streams = state.withLock { state in
            var streams: [WebSocketConnection] = []
            for index in state.devices.indices {
                if let stream = state.devices[index].stream { streams.append(stream) }
                state.devices[index].stream = nil
            }
            return streams
        }
        await withTaskGroup(of: Void.self) { group in
            for lane in 0..<64 {
                group.addTask {
                    for position in stride(from: lane, to: streams.count, by: 64) { await streams[position].close() }
                }
            }
        }
    }

    // MARK: Load

    /// The device's next report: one neighbour gone, another heard instead,
    /// the rest refreshed; the neighbours added.
    private static func move(_ device: inout DeviceState, among devices: [DeviceState], neighbours: Int,
                             movers: Int) -> (added: [Int], report: SightingReport) {
        var gone: [Int] = []
        if device.neighbours.count >= neighbours {
            gone.append(device.neighbours.remove(at: Int.random(in: 0..<device.neighbours.count, using: &device.random)))
        }
        var added: [Int] = []
        // Bounded: with too few devices holding tokens, the device hears fewer.
        var attempts = 0
        while device.neighbours.count < neighbours, attempts < 1000 {
            attempts += 1
            let other = Int.random(in: 0..<movers, using: &device.random)
            guard other != device.index, !device.neighbours.contains(other), !gone.contains(other),
                  devices[other].token != nil else { continue }
            device.neighbours.append(other)
            added.append(other)
        }
        let now = nowMs()
        let seen = device.neighbours.map { other in
            SightingReport.Seen(token: devices[other].token!, medium: .ble, rssi: -60 - Int.random(in: 0..<30, using: &device.random),
                                distance: (Double.random(in: 0.5...10, using: &device.random) * 100).rounded() / 100, seenAtMs: now)
        }
        return (added, SightingReport(seen: seen, gone: gone.map { SightingReport.Gone(token: devices[$0].token!, medium: .ble) }))
    }

    /// Sends the device's next report; its status.
    private func report(_ index: Int, start: ContinuousClock.Instant) async throws -> Int {
        let (report, home, id, authorization) = state.withLock { state in
            var device = state.devices[index]
            let (added, report) = Self.move(&device, among: state.devices, neighbours: options.neighbours, movers: options.devices)
            if state.measuring, state.run.latencies != nil {
                for other in added { device.pending[other] = start }
            }
            state.devices[index] = device
            return (report, device.home ?? "", device.id ?? "", device.authorization)
        }
        let answer = try await requests.request(home, .POST, APIPath.sightings(id), headers: [authorization], body: try json(report))
        return answer.status
    }

    private func health() async throws -> Int {
        let base = state.withLock { $0.floorURL ?? $0.url() }
        return try await requests.request(base, .GET, APIPath.health).status
    }

    /// One request of a run for the device, counted (and timed in an open-loop run) while measuring.
    private func one(_ kind: String, _ index: Int) async {
        let start = ContinuousClock.now
        let outcome: String
        var answered = true
        do {
            outcome = "\(try await kind == "sightings" ? report(index, start: start) : health())"
        } catch {
            outcome = Self.name(of: error)
            answered = false
        }
        let latency = milliseconds(ContinuousClock.now - start)
        state.withLock { state in
            state.devices[index].busy = false
            guard state.measuring else { return }
            state.run.tally.add(outcome)
            if answered { state.run.latencies?.append(latency) }
        }
    }

    private func run(_ command: [String: Any]) async -> [String: Any] {
        let kind = command["kind"] as? String ?? "health"
        let rate = command.double("rate")
        let devices = state.withLock { state in
            state.floorURL = command["url"] as? String
            state.run = Run(latencies: rate == nil ? nil : [])
            state.foundLatencies = []
            for index in state.devices.indices { state.devices[index].pending = [:] }
            return state.devices[..<options.devices].filter { $0.token != nil && $0.streamIsOpen }.map(\.index)
        }
        guard !devices.isEmpty else { return ["error": "no device with an open stream"] }
        let concurrency = command.int("concurrency") ?? 16
        let load = Task {
            if let rate {
                await openLoop(kind, devices, rate: rate)
            } else {
                await closedLoop(kind, devices, concurrency: concurrency)
            }
        }
        // The warm-up's and the window's lengths, not waits for anything.
        try? await Task.sleep(for: .seconds(command.double("warmup") ?? 0))
        let before = state.withLock { state in
            state.measuring = true
            return state.streamEvents
        }
        emit(#"{"measuring": \#(command.int("id") ?? 0)}"#)
        let start = ContinuousClock.now
        try? await Task.sleep(for: .seconds(command.double("seconds") ?? 10))
        let window = seconds(since: start)
        let (run, events) = state.withLock { state in
            state.measuring = false
            state.run.stopping = true
            return (state.run, state.streamEvents - before)
        }
        await load.value
        var result: [String: Any] = ["requests": run.tally["200"], "outcomes": run.tally.values, "seconds": window, "events": events]
        if let latencies = run.latencies {
            result["latencies"] = latencies.map(rounded)
            state.withLock { state in
                result["found"] = state.foundLatencies.map(rounded)
                result["unanswered"] = devices.reduce(0) { $0 + state.devices[$1].pending.count }
            }
        }
        return result
    }

    private var stopping: Bool { state.withLock { $0.run.stopping } }

    /// `concurrency` requests in flight, each of a device of its own (a device's reports go in order).
    private func closedLoop(_ kind: String, _ devices: [Int], concurrency: Int) async {
        await withDiscardingTaskGroup { group in
            for lane in 0..<min(concurrency, devices.count) {
                let mine = Array(stride(from: lane, to: devices.count, by: concurrency).map { devices[$0] })
                group.addTask {
                    var position = 0
                    while !self.stopping {
                        await self.one(kind, mine[position % mine.count])
                        position += 1
                    }
                }
            }
        }
    }

    /// Requests sent on a schedule of `rate` a second, whatever the answers
    /// do; a device whose last report is still out is passed over (its
    /// reports go in order), and a send with no device free is counted as skipped.
    private func openLoop(_ kind: String, _ devices: [Int], rate: Double) async {
        let start = ContinuousClock.now
        var sent = 0
        var position = 0
        await withDiscardingTaskGroup { group in
            while !stopping {
                let due = Int(seconds(since: start) * rate) - sent
                for _ in 0..<max(due, 0) {
                    let chosen: Int? = state.withLock { state in
                        for _ in 0..<devices.count {
                            let index = devices[position % devices.count]
                            position += 1
                            if !state.devices[index].busy {
                                state.devices[index].busy = true
                                return index
                            }
                        }
                        state.run.tally.add("skipped")
                        return nil
                    }
                    if let chosen { group.addTask { await self.one(kind, chosen) } }
                }
                sent += max(due, 0)
                // The schedule's tick: sends are batched per 2 ms at most.
                try? await Task.sleep(for: .milliseconds(2))
            }
        }
    }

    // MARK: Upstream

    private func channels(count: Int, within seconds: Double) async -> [String: Any] {
        let start = ContinuousClock.now
        let outcomes = SharedCounts()
        let chosen = state.withLock { $0.devices[..<min(count, options.devices)].filter { $0.id != nil && $0.channel == nil }.map(\.index) }
        await inLanes(chosen, until: start + .seconds(seconds), outcomes: outcomes) { index in
            let channel = await self.connect(index, "channel", outcomes: outcomes,
                                             received: { [self] frame in channelEvent(index, frame) },
                                             ended: { [self] code in channelEnded(index, code) })
            guard let channel else { return }
            self.state.withLock { $0.devices[index].channel = channel }
            outcomes.add("opened")
        }
        return ["outcomes": outcomes.values, "open": openChannels().count, "seconds": self.seconds(since: start)]
    }

    private func openChannels() -> [Int] {
        state.withLock { $0.devices.filter { $0.channel?.isOpen == true }.map(\.index) }
    }

    private func closeChannels() async {
        let channels = state.withLock { state in
            var channels: [WebSocketConnection] = []
            for index in state.devices.indices {
                if let channel = state.devices[index].channel { channels.append(channel) }
                state.devices[index].channel = nil
                Self.givenUp(&state, index)
            }
            return channels
        }
        for channel in channels { await channel.close() }
    }

    /// The device's next message, unless the run is stopping.
    private func sendUpstream(_ index: Int) {
        let next: (WebSocketConnection, String, Int)? = state.withLock { state in
            guard state.upstream.sending, let channel = state.devices[index].channel, channel.isOpen else { return nil }
            state.devices[index].upstreamSequence += 1
            let sequence = state.devices[index].upstreamSequence
            let id = "u\(options.process)-\(index)-\(sequence)"
            state.devices[index].upstreamOut[id] = .now
            state.upstream.out += 1
            return (channel, id, sequence)
        }
        guard let (channel, id, sequence) = next else { return }
        let request = ChannelRequest.send(ChannelUpstream(app: "bench", messageId: id, to: options.to, data: ["n": "\(sequence)"],
                                                          expiresAtMs: nowMs() + 600_000))
        guard let frame = try? json(request) else { return }
        channel.send(frame)
    }

    /// One event of a device's channel: each `sent` or `failed` settles a message, whose device sends the next.
    private func channelEvent(_ index: Int, _ frame: ByteBuffer) {
        guard let event = try? JSONDecoder().decode(ChannelEvent.self, from: frame) else { return }
        let kind: String
        let settled: [String]
        switch event {
        case .sent(let messages):
            kind = "sent"
            settled = messages.map(\.messageId)
        case .failed(let failure):
            kind = "failed"
            settled = [failure.messageId]
            state.withLock { $0.upstream.outcomes.add("failed \(failure.error)") }
        case .message:
            return
        }
        let now = ContinuousClock.now
        for id in settled {
            let known = state.withLock { state in
                guard let sent = state.devices[index].upstreamOut.removeValue(forKey: id) else {
                    state.upstream.outcomes.add("\(kind) for no message out")
                    return false
                }
                state.upstream.out -= 1
                if kind == "sent" {
                    state.upstream.done += 1
                    if state.upstream.measuring { state.upstream.latencies.append(milliseconds(now - sent)) }
                }
                return true
            }
            if known { sendUpstream(index) }
        }
    }

    private func channelEnded(_ index: Int, _ code: Int) {
        state.withLock { state in
            if code != 1000, code != -1 { state.upstream.outcomes.add("channel closed \(code)") }
            Self.givenUp(&state, index)
        }
    }

    /// The device's channel ended: what it had out is counted as lost.
    private static func givenUp(_ state: inout State, _ index: Int) {
        let out = state.devices[index].upstreamOut.count
        guard out > 0 else { return }
        state.upstream.outcomes.add("lost with the channel", out)
        state.upstream.out -= out
        state.devices[index].upstreamOut = [:]
    }

    private func upstreamStart(inFlight: Int, warmUp: Double, within seconds: Double) async -> [String: Any] {
        let devices = openChannels()
        guard !devices.isEmpty else { return ["error": "no device with an open channel"] }
        state.withLock { state in
            state.upstream.sending = true
            state.upstream.done = 0
            state.upstream.target = devices.count * inFlight
            state.upstream.outcomes = Counts()
        }
        let start = ContinuousClock.now
        for _ in 0..<inFlight {
            for index in devices { sendUpstream(index) }
        }
        let warmed = await poll(until: start + .seconds(seconds)) { $0.upstream.done >= $0.upstream.target }
        let rest = warmUp - self.seconds(since: start)
        // The warm-up's shortest length, not a wait for anything.
        if rest > 0 { try? await Task.sleep(for: .seconds(rest)) }
        return ["devices": devices.count, "warmed": warmed, "seconds": self.seconds(since: start),
                "settled": state.withLock { $0.upstream.done }]
    }

    private func upstreamWindow(id: Int, seconds: Double) async -> [String: Any] {
        emit(#"{"measuring": \#(id)}"#)
        let before = state.withLock { state in
            state.upstream.latencies = []
            state.upstream.measuring = true
            return state.upstream.outcomes
        }
        let start = ContinuousClock.now
        // The measured window's length.
        try? await Task.sleep(for: .seconds(seconds))
        let window = self.seconds(since: start)
        return state.withLock { state in
            state.upstream.measuring = false
            var outcomes = state.upstream.outcomes - before
            outcomes["200"] = state.upstream.latencies.count
            return ["requests": state.upstream.latencies.count, "outcomes": outcomes, "seconds": window,
                    "latencies": state.upstream.latencies.map(rounded)]
        }
    }

    private func upstreamStop(within seconds: Double) async -> [String: Any] {
        state.withLock { $0.upstream.sending = false }
        let start = ContinuousClock.now
        _ = await poll(until: start + .seconds(seconds)) { $0.upstream.out <= 0 }
        return state.withLock { state in
            ["left": state.upstream.out, "seconds": self.seconds(since: start), "outcomes": state.upstream.outcomes.values]
        }
    }

    /// Whether `condition` came to hold before `deadline`, looked at every
    /// 10 ms: the generator's own progress (messages settled), which its
    /// channels' events move.
    private func poll(until deadline: ContinuousClock.Instant, _ condition: (inout State) -> Bool) async -> Bool {
        while true {
            if state.withLock({ condition(&$0) }) { return true }
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    // MARK: Helpers

    private func count(_ name: String) {
        state.withLock { $0.counts.add(name) }
    }

    private func seconds(since start: ContinuousClock.Instant) -> Double {
        (milliseconds(ContinuousClock.now - start) / 1000 * 1000).rounded() / 1000
    }

    /// An error's name, as the benchmark's outcomes count it.
    static func name(of error: any Error) -> String {
        if let failure = error as? HTTPFailure { return failure.description }
        return String(describing: Swift.type(of: error))
    }
}

private func milliseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1000 + Double(attoseconds) / 1e15
}

private func rounded(_ value: Double) -> Double {
    (value * 1000).rounded() / 1000
}

private func nowMs() -> UInt64 {
    UInt64(Date().timeIntervalSince1970 * 1000)
}

/// `value` as a JSON body.
private func json(_ value: some Encodable) throws -> ByteBuffer {
    ByteBuffer(data: try JSONEncoder().encode(value))
}

extension [String: Any] {
    func double(_ key: String) -> Double? { (self[key] as? NSNumber)?.doubleValue }
    func int(_ key: String) -> Int? { (self[key] as? NSNumber)?.intValue }
}
