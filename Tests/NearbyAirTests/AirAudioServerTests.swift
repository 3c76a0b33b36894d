import Foundation
import Logging
import NIOCore
import NIOPosix
@testable import NearbyAir
import NearbyCore
import Testing

/// Runs an AirServer on a fresh socket for the length of `body`, then stops it
/// and waits until it has stopped.
private func withAudioAir(_ parameters: AirParameters, _ body: (String) async throws -> Void) async throws {
    try await withAudioAir(parameters) { path, _ in try await body(path) }
}

private func withAudioAir(_ parameters: AirParameters, _ body: (String, AirServer) async throws -> Void) async throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("air-\(UUID().uuidString.prefix(8)).sock").path
    let server = AirServer(parameters: parameters, logger: Logger(label: "test-air"))
    let (listening, ready) = AsyncStream.makeStream(of: Void.self)
    let running = Task { try await server.run(socketPath: path) { ready.yield() } }
    for await _ in listening { break }
    do {
        try await body(path, server)
    } catch {
        running.cancel()
        _ = await running.result
        throw error
    }
    running.cancel()
    _ = await running.result
}

private struct TimedOut: Error {}
private struct LinkClosed: Error {}

/// `body`'s result, or TimedOut after `seconds`: a bound on waiting, never a synchronisation.
private func within<T: Sendable>(_ seconds: Double = 20, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            throw TimedOut()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// `count` blocks captured by `link`, from the first whose loudest sample exceeds `threshold`.
private func blocks(_ link: AirAudioLink, _ count: Int, from threshold: Float) async throws -> [[Float]] {
    try await within {
        var result: [[Float]] = []
        for await block in link.captured {
            if result.isEmpty, (block.map(abs).max() ?? 0) <= threshold { continue }
            result.append(block)
            if result.count == count { return result }
        }
        throw LinkClosed()
    }
}

/// Waits until `link` is closed; throws TimedOut if it stays open.
private func closed(_ link: AirAudioLink) async throws {
    try await within {
        for await _ in link.captured {}
    }
}

private func expectClose(_ actual: [Float], _ expected: [Float], within tolerance: Float,
                         sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(actual.count == expected.count, sourceLocation: sourceLocation)
    let worst = zip(actual, expected).map { abs($0 - $1) }.max() ?? 0
    #expect(worst <= tolerance, "largest difference \(worst)", sourceLocation: sourceLocation)
}

private func devices(_ client: AirClient) async throws -> [AirDevice] {
    guard case .devices(_, let devices) = try await client.request(.list) else { throw LinkClosed() }
    return devices
}

/// A frame with the samples' bits as they are, or any count.
private func rawFrame(count: UInt32, _ samples: [Float]) -> ByteBuffer {
    var buffer = ByteBuffer()
    buffer.writeInteger(count, endianness: .little)
    for sample in samples { buffer.writeInteger(sample.bitPattern, endianness: .little) }
    return buffer
}

/// A connection that writes bytes as they are and reads lines (and frames after
/// the first line when `samplesFollow`).
private func rawConnection(_ path: String, samplesFollow: Bool) async throws -> AirChannel {
    try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(unixDomainSocketPath: path) { channel in AirFraming.wrap(channel) { _ in samplesFollow } }
}

@Suite struct AirAudioServerTests {
    /// No noise to speak of (an RMS of 1e-10) and no absorption: gain(2 m) is 0.5, gain(1000 m) 0.001.
    let exact = AirParameters(interval: 0.05, audioNoise: -200, absorption: 0)
    let ramp: [Float] = (0..<1920).map { 0.25 + 0.25 * Float($0) / 1919 }
    let silence = [Float](repeating: 0, count: 960)

    @Test func aDeviceHearsAnotherScaledByDistance() async throws {
        try await withAudioAir(exact) { path in
            let a = try await AirClient(socketPath: path)
            let b = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            try await b.request(.attach(device: "B", position: Position(x: 2, y: 0)))
            let speaker = try await AirAudioLink(socketPath: path, device: "A")
            let microphone = try await AirAudioLink(socketPath: path, device: "B")
            #expect(try await devices(a).map(\.audio) == [true, true])

            async let own = blocks(speaker, 3, from: 1e-6)
            async let heard = blocks(microphone, 3, from: 1e-6)
            try await speaker.play(ramp)
            // The ramp starts a block (A's speaker was silent), so it is heard at the blocks' first samples.
            let (ownBlocks, heardBlocks) = try await (own, heard)
            expectClose(heardBlocks[0], ramp[0..<960].map { 0.5 * $0 }, within: 1e-8)
            expectClose(heardBlocks[1], ramp[960...].map { 0.5 * $0 }, within: 1e-8)
            expectClose(heardBlocks[2], silence, within: 1e-8)
            // A hears itself as loud as a device 1 m away.
            expectClose(ownBlocks[0], Array(ramp[0..<960]), within: 1e-8)
            expectClose(ownBlocks[1], Array(ramp[960...]), within: 1e-8)
            expectClose(ownBlocks[2], silence, within: 1e-8)

            // 1000 m away: 500 times (54 dB) weaker.
            try await a.request(.move(device: "B", position: Position(x: 1000, y: 0)))
            async let far = blocks(microphone, 2, from: 1e-6)
            try await speaker.play(ramp)
            let farBlocks = try await far
            expectClose(farBlocks[0], ramp[0..<960].map { 0.001 * $0 }, within: 1e-8)
            expectClose(farBlocks[1], ramp[960...].map { 0.001 * $0 }, within: 1e-8)

            for link in [speaker, microphone] { link.close() }
            for client in [a, b] { client.close() }
        }
    }

    @Test func theNoiseFloorIsHeard() async throws {
        try await withAudioAir(AirParameters(interval: 0.05, audioNoise: -30)) { path in
            let a = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            let link = try await AirAudioLink(socketPath: path, device: "A")
            let samples = try await blocks(link, 20, from: -1).flatMap { $0 }
            let rms = (samples.map { Double($0 * $0) }.reduce(0, +) / Double(samples.count)).squareRoot()
            #expect(abs(20 * log10(rms) + 30) < 0.3, "\(20 * log10(rms)) dBFS")
            link.close()
            a.close()
        }
    }

    @Test func linksAreForAttachedDevicesOneEach() async throws {
        try await withAudioAir(exact) { path in
            await #expect(throws: AirProtocolError("no device named 'A' is attached")) {
                _ = try await AirAudioLink(socketPath: path, device: "A")
            }
            let a = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            let link = try await AirAudioLink(socketPath: path, device: "A")
            await #expect(throws: AirProtocolError("device 'A' already has an audio link")) {
                _ = try await AirAudioLink(socketPath: path, device: "A")
            }
            // The refusals touched neither the link nor the control connection.
            _ = try await blocks(link, 2, from: -1)
            await #expect(throws: AirProtocolError("open audio links with AirAudioLink")) {
                try await a.request(.audio(device: "A"))
            }
            #expect(try await devices(a).map(\.audio) == [true])

            // A link closed by its device can be opened again.
            link.close()
            try await closed(link)
            // The stream ends when this side closes; the air frees the device's
            // link when it reads the close, which its device list then shows.
            try await within {
                while try await devices(a).map(\.audio) != [false] { await Task.yield() }
            }
            let again = try await AirAudioLink(socketPath: path, device: "A")
            _ = try await blocks(again, 1, from: -1)
            again.close()
            a.close()
        }
    }

    @Test(arguments: [
        ("non-finite sample", rawFrame(count: 2, [0.5, .nan])),
        ("zero-length frame", rawFrame(count: 0, [])),
        ("oversized frame", rawFrame(count: 48_001, [])),
    ])
    func aBadFrameClosesOnlyItsLink(_ fault: String, _ frame: ByteBuffer) async throws {
        try await withAudioAir(exact) { path in
            let a = try await AirClient(socketPath: path)
            let b = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            try await b.request(.attach(device: "B", position: Position(x: 1, y: 0)))
            let bad = try await AirAudioLink(socketPath: path, device: "A")
            let good = try await AirAudioLink(socketPath: path, device: "B")
            try await bad.send(frame: frame)
            try await closed(bad)
            await #expect(throws: AirProtocolError.self) { try await bad.play([0.1]) }

            // The control connection still works and A is still there, without its link.
            #expect(try await devices(a).map(\.audio) == [false, true])
            // The other link goes on: B hears itself.
            async let own = blocks(good, 1, from: 1e-6)
            try await good.play(Array(ramp[0..<960]))
            expectClose(try await own[0], Array(ramp[0..<960]), within: 1e-8)
            // And A can open a new one.
            let again = try await AirAudioLink(socketPath: path, device: "A")
            _ = try await blocks(again, 1, from: -1)
            for link in [good, again] { link.close() }
            for client in [a, b] { client.close() }
        }
    }

    @Test func anOverflowingSpeakerClosesItsLink() async throws {
        try await withAudioAir(exact) { path in
            let a = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            let link = try await AirAudioLink(socketPath: path, device: "A")
            // Faster than the air plays: the queue fills up within a few seconds of samples past 10 s.
            let second = [Float](repeating: 0.1, count: AirAudioLink.sampleRate)
            var sent = 0
            while sent < 60 {
                do {
                    try await link.play(second)
                } catch {
                    break
                }
                sent += 1
            }
            #expect(sent >= 10, "the air took 10 s of samples at least")
            try await closed(link)
            #expect(try await devices(a).map(\.audio) == [false])
            a.close()
        }
    }

    @Test func detachingClosesTheAudioLink() async throws {
        try await withAudioAir(exact) { path in
            let a = try await AirClient(socketPath: path)
            let control = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            let link = try await AirAudioLink(socketPath: path, device: "A")
            _ = try await blocks(link, 1, from: -1)
            a.close()
            try await closed(link)
            await #expect(throws: AirProtocolError.self) { try await link.play([0.1]) }
            #expect(try await devices(control).isEmpty)
            control.close()
        }
    }

    @Test func framesMayFollowTheAudioRequestBeforeTheReply() async throws {
        try await withAudioAir(exact) { path in
            let a = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            let raw = try await rawConnection(path, samplesFollow: true)
            // Ten samples: the count's first byte is a newline, which a line decoder would split at.
            let samples: [Float] = (1...10).map { Float($0) / 20 }
            let heard = try await within {
                try await raw.executeThenClose { inbound, outbound in
                    var bytes = ByteBuffer(string: AirCoding.encode(id: 5, .audio(device: "A")) + "\n")
                    bytes.writeImmutableBuffer(AirAudio.frame(samples))
                    try await outbound.write(bytes)
                    var frames = inbound.makeAsyncIterator()
                    guard case .samplesFollow(let reply)? = try await frames.next() else { throw LinkClosed() }
                    #expect(try AirCoding.decodeMessage(String(buffer: reply)) == .ok(id: 5))
                    while let frame = try await frames.next() {
                        guard case .samples(let payload) = frame else { continue }
                        let block = AirAudio.samples(in: payload)
                        #expect(block.count == 960)
                        if (block.map(abs).max() ?? 0) > 1e-6 { return block }
                    }
                    throw LinkClosed()
                }
            }
            expectClose(heard, samples + [Float](repeating: 0, count: 950), within: 1e-8)
            a.close()
        }
    }

    @Test func anAudioRequestAfterTheFirstLineIsRefused() async throws {
        try await withAudioAir(exact) { path in
            let raw = try await rawConnection(path, samplesFollow: false)
            let replies = try await within {
                try await raw.executeThenClose { inbound, outbound in
                    var replies: [AirMessage] = []
                    var lines = inbound.makeAsyncIterator()
                    for request in [AirRequest.attach(device: "A", position: Position(x: 0, y: 0)), .audio(device: "A"), .list] {
                        try await outbound.write(ByteBuffer(string: AirCoding.encode(id: replies.count + 1, request) + "\n"))
                        guard case .line(let line)? = try await lines.next() else { throw LinkClosed() }
                        replies.append(try AirCoding.decodeMessage(String(buffer: line)))
                    }
                    return replies
                }
            }
            #expect(replies == [
                .ok(id: 1),
                .failed(id: 2, message: "an audio link must be opened by the first line of its own connection"),
                .devices(id: 3, [AirDevice(name: "A", position: Position(x: 0, y: 0), broadcasts: 0, scanning: [], audio: false)]),
            ])
        }
    }

    @Test func aListenerThatDoesNotReadLosesItsOldestBlocksAndHoldsUpNobody() async throws {
        try await withAudioAir(exact) { path, server in
            let a = try await AirClient(socketPath: path)
            let b = try await AirClient(socketPath: path)
            try await a.request(.attach(device: "A", position: Position(x: 0, y: 0)))
            try await b.request(.attach(device: "B", position: Position(x: 1, y: 0)))
            // A's link is opened and then never read: the socket and the buffers behind it fill up.
            let stalled = try await rawConnection(path, samplesFollow: true)
            try await stalled.channel.writeAndFlush(
                ByteBuffer(string: AirCoding.encode(id: 1, .audio(device: "A")) + "\n"))
            let link = try await AirAudioLink(socketPath: path, device: "B")
            // B keeps hearing every tick (5 s of blocks, more than everything between A and the air holds).
            let received = try await within(30) {
                var count = 0
                for await _ in link.captured {
                    count += 1
                    if count == 250 { break }
                }
                return count
            }
            #expect(received == 250)
            let (produced, dropped) = try #require(await server.blockCounts(of: "A"))
            #expect(dropped > 0, "the air dropped A's oldest blocks")
            // How many is a matter of time (the machine's load); the newest second is always kept.
            #expect(dropped <= produced - AirAudio.pendingBlocks, "A's newest blocks are kept")
            link.close()
            try await stalled.channel.close()
            for client in [a, b] { client.close() }
        }
    }
}
