import AudioModem
import Foundation
import NearbyCore
import Testing
@testable import ALSA

/// The modem's bursts through the real libasound code: what is played reaches
/// the `file` plugin's raw file and decodes there; a burst fed to a capture
/// PCM decodes from the chunks it delivers.
@Suite(.timeLimit(.minutes(1)))
struct ModemThroughALSATests {
    let token = Token(hex: "a1b2c3d4e5f60718")!

    /// 0.1 s of silence, the burst, silence to a whole number of 20 ms periods
    /// and 0.1 s more: a demodulator needs quiet on both sides of a burst.
    func burstWithSilence(periodFrames: Int = 960) -> [Float] {
        let burst = TokenModulator(sampleRate: 48_000).waveform(for: token).map { $0 * 0.5 }
        var samples = [Float](repeating: 0, count: 4800) + burst
        samples += [Float](repeating: 0, count: (periodFrames - samples.count % periodFrames) % periodFrames + 4800)
        return samples
    }

    func decode(_ samples: [Float]) -> [Token] {
        var demodulator = TokenDemodulator(sampleRate: 48_000)
        return (demodulator.process(samples) + demodulator.finish()).map(\.token)
    }

    @Test func aBurstPlayedThroughALSADecodesFromWhatThePCMWrote() throws {
        let fixture = try ALSAFixture { f in
            "pcm.speaker { type file slave.pcm null file \"\(f.path("out.raw"))\" format raw }"
        }
        defer { fixture.remove() }
        let speaker = try PCMPlayback(configuration: fixture.configuration("speaker"))
        try speaker.play(burstWithSilence())
        speaker.stop(drain: true)
        #expect(decode(try readRaw(Float.self, from: fixture.path("out.raw"))) == [token])
    }

    @Test func aBurstFedToACapturePCMDecodesFromItsChunks() async throws {
        // S16, so that the whole burst fits in the pipe's buffer at once.
        let fixture = try ALSAFixture { f in
            """
            pcm.microphone {
                type file
                file "/dev/null"
                infile "\(f.path("in.fifo"))"
                slave.pcm { type linear slave { pcm null format S16_LE } }
            }
            """
        }
        defer { fixture.remove() }
        let samples = burstWithSilence()
        let fifo = try PrefilledFIFO(path: fixture.path("in.fifo"),
                                     samples: samples.map { Int16(($0 * 32767).rounded()) })
        let microphone = try PCMCapture(configuration: fixture.configuration("microphone"))
        let chunks = try await collect(samples.count, from: microphone)
        fifo.closeWriter()
        microphone.stop()
        #expect(decode(chunks.flatMap(\.samples)) == [token])
    }
}
