import Foundation
import Testing
@testable import ALSA

/// Playback through the `file` plugin, which copies everything written to the
/// PCM into a raw file. Its slave, `null`, throws the audio away. `null` has
/// no clock: it always has room. So the audio thread runs as fast as the CPU,
/// and while the queue is empty it writes silence just as fast. The tests
/// therefore stop right after queueing and allow any run of zeros between and
/// after the bursts.
@Suite(.timeLimit(.minutes(1)))
struct PlaybackTests {
    @Test func playsQueuedBuffersInOrderAndCompletely() throws {
        let fixture = try ALSAFixture { f in
            "pcm.out { type file slave.pcm null file \"\(f.path("out.raw"))\" format raw }"
        }
        defer { fixture.remove() }
        let player = try PCMPlayback(configuration: fixture.configuration("out"))
        #expect(player.rate == 48000)
        #expect(player.format == .float32)
        #expect(player.periodFrames == 960)
        #expect(player.bufferFrames == 4 * 960)

        let tone = toneBurst(count: 4800)
        let ramp = (1...1000).map { Float($0) / 1000 }
        try player.play(tone)
        try player.play(ramp)
        player.stop(drain: true)

        let out = try readRaw(Float.self, from: fixture.path("out.raw"))
        // Float32 reaches the file untouched. Nothing is written before the
        // first buffer, so the tone starts the file.
        #expect(Array(out.prefix(tone.count)) == tone)
        let afterTone = out.dropFirst(tone.count).drop { $0 == 0 }
        #expect(Array(afterTone.prefix(ramp.count)) == ramp)
        #expect(afterTone.dropFirst(ramp.count).allSatisfy { $0 == 0 })
        #expect(player.framesWritten == out.count)
        #expect(player.queuedSamples == 0)
        #expect(player.xruns == 0)
        #expect(player.failure == nil)
    }

    @Test func convertsToS16WhenThePCMRefusesFloat() throws {
        // `linear` accepts only integer formats from its client, so the
        // wrapper must fall back to S16. The file plugin sits on top and
        // records exactly what the wrapper wrote.
        let fixture = try ALSAFixture { f in
            """
            pcm.out16 {
                type file
                file "\(f.path("out.raw"))"
                format raw
                slave.pcm { type linear slave { pcm null format S16_LE } }
            }
            """
        }
        defer { fixture.remove() }
        let player = try PCMPlayback(configuration: fixture.configuration("out16"))
        #expect(player.format == .int16)

        let samples: [Float] = toneBurst(count: 2000) + [1, -1, 1.5, -2, 0.25]
        try player.play(samples)
        player.stop(drain: true)

        let out = try readRaw(Int16.self, from: fixture.path("out.raw"))
        let expected = samples.map { Int16((min(max($0, -1), 1) * 32767).rounded()) }
        #expect(Array(out.prefix(expected.count)) == expected)
        #expect(out.dropFirst(expected.count).allSatisfy { $0 == 0 })
    }

    @Test func refusesBuffersBeyondCapacityAndAfterStop() throws {
        let fixture = try ALSAFixture { f in
            "pcm.out { type file slave.pcm null file \"\(f.path("out.raw"))\" format raw }"
        }
        defer { fixture.remove() }
        let player = try PCMPlayback(configuration: fixture.configuration("out"), queueCapacity: 100)
        #expect(throws: ALSAError.queueFull(pcm: "out", capacity: 100)) {
            try player.play([Float](repeating: 0.1, count: 101))
        }
        player.stop()
        player.stop()
        #expect(throws: ALSAError.stopped(pcm: "out")) { try player.play([0.1]) }
    }

    @Test func stopReturnsPromptlyWhileWaitingForAudio() throws {
        let fixture = try ALSAFixture { f in
            "pcm.out { type file slave.pcm null file \"\(f.path("out.raw"))\" format raw }"
        }
        defer { fixture.remove() }
        let player = try PCMPlayback(configuration: fixture.configuration("out"))
        // Nothing has been queued, so the audio thread is blocked in poll()
        // waiting for the first buffer. The bound is a generous upper limit;
        // nothing waits on it.
        let elapsed = ContinuousClock().measure { player.stop(drain: false) }
        #expect(elapsed < .seconds(2))
        #expect(player.framesWritten == 0)
        #expect(try readRaw(UInt8.self, from: fixture.path("out.raw")).isEmpty)
    }
}
