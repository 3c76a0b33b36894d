import Foundation
import Testing
@testable import ALSA

/// Capture through the `file` plugin with an `infile`. On each read, the
/// plugin first reads a period from its slave (`null`, which is always ready
/// and has no clock). It then overwrites that period with the next bytes of
/// `infile`. Those bytes are raw, with no header, in the format the client
/// negotiated: here native Float32 mono, or S16 when the chain refuses
/// Float32. If a read(2) of `infile` returns less than a period, the rest of
/// the period keeps the slave's data. So the tests feed whole periods through
/// a `PrefilledFIFO`. The plugin also needs an output `file`, and /dev/null
/// serves for that.
@Suite(.timeLimit(.minutes(1)))
struct CaptureTests {
    @Test func deliversTheInputInOrder() async throws {
        let samples = (0..<5 * 960).map { Float($0 % 2000) / 2000 - 0.5 }
        let fixture = try ALSAFixture { f in
            "pcm.in { type file slave.pcm null file \"/dev/null\" infile \"\(f.path("in.fifo"))\" }"
        }
        defer { fixture.remove() }
        let fifo = try PrefilledFIFO(path: fixture.path("in.fifo"), samples: samples)

        let capture = try PCMCapture(configuration: fixture.configuration("in"))
        #expect(capture.rate == 48000)
        #expect(capture.format == .float32)
        #expect(capture.periodFrames == 960)
        let chunks = try await collect(samples.count, from: capture)
        // The audio thread is now blocked reading the empty FIFO, so nothing more was produced or dropped.
        #expect(capture.droppedSamples == 0)
        fifo.closeWriter()
        capture.stop()

        #expect(chunks.flatMap(\.samples) == samples)
        #expect(chunks.map(\.startFrame) == [0, 960, 1920, 2880, 3840])
        #expect(capture.xruns == 0)
        #expect(capture.failure == nil)
    }

    @Test func convertsFromS16WhenThePCMRefusesFloat() async throws {
        let samples: [Int16] = (0..<3 * 960).map { Int16(truncatingIfNeeded: $0 * 37 - 40000) }
        let fixture = try ALSAFixture { f in
            """
            pcm.in16 {
                type file
                file "/dev/null"
                infile "\(f.path("in.fifo"))"
                slave.pcm { type linear slave { pcm null format S16_LE } }
            }
            """
        }
        defer { fixture.remove() }
        let fifo = try PrefilledFIFO(path: fixture.path("in.fifo"), samples: samples)

        let capture = try PCMCapture(configuration: fixture.configuration("in16"))
        #expect(capture.format == .int16)
        let chunks = try await collect(samples.count, from: capture)
        fifo.closeWriter()
        capture.stop()
        #expect(chunks.flatMap(\.samples) == samples.map { Float($0) / 32768 })
    }

    @Test func slowConsumerLosesTheOldestChunksAndTheyAreCounted() async throws {
        // Plain `null` capture is always ready, so the audio thread produces
        // chunks as fast as it can. Nobody reads `chunks` until after stop().
        let fixture = try ALSAFixture { _ in "" }
        defer { fixture.remove() }
        let capture = try PCMCapture(configuration: fixture.configuration("null"), bufferedChunks: 4)
        #expect(await waitUntil { capture.droppedSamples > 0 })
        capture.stop()

        var kept: [PCMCapture.Chunk] = []
        for try await chunk in capture.chunks { kept.append(chunk) }
        #expect(kept.count == 4)
        let keptSamples = kept.reduce(0) { $0 + $1.samples.count }
        #expect(kept.last.map { $0.startFrame + $0.samples.count } == capture.framesCaptured)
        #expect(capture.droppedSamples == capture.framesCaptured - keptSamples)
        #expect(zip(kept, kept.dropFirst()).allSatisfy { $0.startFrame + $0.samples.count == $1.startFrame })
    }

    @Test func stopReturnsPromptlyAndFinishesTheStream() async throws {
        let fixture = try ALSAFixture { _ in "" }
        defer { fixture.remove() }
        let capture = try PCMCapture(configuration: fixture.configuration("null"), bufferedChunks: 1)
        // The bound is a generous upper limit; nothing waits on it.
        let elapsed = ContinuousClock().measure { capture.stop() }
        #expect(elapsed < .seconds(2))
        capture.stop()
        for try await _ in capture.chunks {}
        #expect(capture.failure == nil)
    }

    @Test func recoversFromXrunsOnARealHandle() throws {
        // `null` never overruns or underruns, so no test here can make an xrun
        // happen on its own. This calls the recovery path directly, with the
        // codes libasound returns, on real open handles.
        let fixture = try ALSAFixture { _ in "" }
        defer { fixture.remove() }
        var capture = try PCMStream(.capture, configuration: fixture.configuration("null"))
        try capture.recover(from: -EPIPE, operation: "read")
        try capture.recover(from: -ESTRPIPE, operation: "read")
        #expect(capture.xruns == 2)
        var buffer = [Float](repeating: 1, count: capture.periodFrames)
        #expect(try capture.wait())
        #expect(try capture.read(into: &buffer) == capture.periodFrames)

        var playback = try PCMStream(.playback, configuration: fixture.configuration("null"))
        try playback.recover(from: -EPIPE, operation: "write")
        #expect(playback.xruns == 1)
        #expect(try playback.wait())
        #expect(try playback.write(toneBurst(count: 100)[...]) == 100)

        #expect(throws: ALSAError.failed(pcm: "null", operation: "write", code: -EIO, message: "Input/output error")) {
            try playback.recover(from: -EIO, operation: "write")
        }
        #expect(playback.xruns == 1)
    }
}
