@testable import AudioModem
import Foundation
import NearbyCore
import Testing

private let token = Token(hex: "0123456789abcdef")!

@Suite struct WaveformTests {
    @Test(arguments: [48_000.0, 44_100.0])
    func aBurstIsShortFullScaleAndConstantEnvelope(sampleRate: Double) {
        let burst = TokenModulator(sampleRate: sampleRate).waveform(for: token)
        #expect(Double(burst.count) / sampleRate <= 0.30)
        let peak = burst.reduce(0) { max($0, abs($1)) }
        #expect(abs(peak - 1) < 1e-6)
        let papr = 10 * log10(Double(peak * peak) / power(burst))
        #expect(papr <= 6, "peak-to-average \(papr) dB")
    }

    @Test(arguments: [48_000.0, 44_100.0])
    func ninetyNinePercentOfThePowerIsIn18To20_5kHz(sampleRate: Double) {
        let burst = TokenModulator(sampleRate: sampleRate).waveform(for: token)
        // A sharp band-pass whose transition bands lie inside 18.0–20.5 kHz
        // passes less than that band holds: a lower bound on its share.
        let band = FIR.bandPass(low: 18_100, high: 20_400, sampleRate: sampleRate, length: 2 * Int(sampleRate / 60) + 1)
        let share = energy(of: burst, through: band) / (power(burst) * Double(burst.count))
        #expect(share >= 0.99, "\(share * 100) % in band")
    }

    @Test(arguments: [48_000.0, 44_100.0])
    func noClickLeaksBelow17kHz(sampleRate: Double) {
        let burst = TokenModulator(sampleRate: sampleRate).waveform(for: token)
        let below = FIR.lowPass(cutoff: 16_800, sampleRate: sampleRate, length: 2 * Int(sampleRate / 120) + 1)
        let ratio = 10 * log10(energy(of: burst, through: below) / (power(burst) * Double(burst.count)))
        #expect(ratio <= -40, "power below 17 kHz at \(ratio) dB")
    }
}

@Suite struct CodingTests {
    @Test func theCRCCatchesEverySingleAndDoubleBitError() {
        let bits = token.bytes.flatMap { byte in (0..<8).map { (byte >> (7 - $0)) & 1 } }
        let framed = CRC24.appending(to: bits)
        #expect(CRC24.isValid(framed))
        for i in framed.indices {
            var one = framed
            one[i] ^= 1
            #expect(!CRC24.isValid(one))
            for j in (i + 1)..<framed.count {
                var two = one
                two[j] ^= 1
                #expect(!CRC24.isValid(two))
            }
        }
    }

    @Test func thePolarCodeCorrectsNoiseAndItsListFindsTheCRC() {
        var channel = Channel(seed: 8)
        let code = Frame.code
        var decoded = 0
        for _ in 0..<50 {
            let information = CRC24.appending(to: (0..<64).map { _ in UInt8(channel.uniform() < 0.5 ? 0 : 1) })
            // BPSK at Es/N0 = 0 dB: many hard decisions are wrong, the code still wins.
            let llr = code.encode(information).map { Float(($0 == 0 ? 1 : -1) + channel.gaussian() * 0.7071) }
            let wrong = llr.enumerated().filter { ($1 < 0) != (code.encode(information)[$0] == 1) }.count
            #expect(wrong > 10)
            if code.decode(llr, listSize: 32, accept: CRC24.isValid) == information { decoded += 1 }
        }
        #expect(decoded == 50)
    }
}

@Suite struct DemodulatorTests {
    private func decode(_ capture: [Float], sampleRate: Int = 48_000, chunks channel: inout Channel) -> [HeardToken] {
        var demodulator = TokenDemodulator(sampleRate: sampleRate)
        var heard: [HeardToken] = []
        var start = 0
        while start < capture.count {
            let size = 1 + Int(channel.uniform() * 5000)
            heard += demodulator.process(capture[start..<min(start + size, capture.count)])
            start += size
        }
        return heard + demodulator.finish()
    }

    @Test(arguments: [48_000, 44_100])
    func findsEveryBurstInAStreamAtAnyGainAndReportsItsLevel(sampleRate: Int) {
        var channel = Channel(seed: UInt64(sampleRate))
        let modulator = TokenModulator(sampleRate: Double(sampleRate))
        let tokens = (0..<4).map { i in Token(bytes: (0..<8).map { _ in UInt8(channel.uniform() * 256) })! }
        let gains: [Float] = [1, 0.1, 0.003, 0.3]
        let bursts = tokens.enumerated().map { i, token in
            (samples: modulator.waveform(for: token), offset: sampleRate / 3 + i * sampleRate * 7 / 10 + Int(channel.uniform() * 1000),
             gain: gains[i])
        }
        // Noise 20 dB under the faintest burst's mean power in the 3 kHz reference band.
        let faintest = 0.003 * 0.003 * power(bursts[2].samples)
        let capture = channel.capture(length: 3 * sampleRate, bursts: bursts,
                                      noiseRMS: (faintest / 100 * Double(sampleRate) / 2 / 3_000).squareRoot())
        let heard = decode(capture, sampleRate: sampleRate, chunks: &channel)
        #expect(heard.map(\.token) == tokens)
        for (burst, token) in zip(bursts, heard) {
            #expect(abs(token.sampleOffset - burst.offset - modulator.leadIn) < sampleRate / 1000, "start within 1 ms")
            // The burst's carrier, before its peak was normalised, is at about 1/1.05 of the peak.
            let expected = 20 * log10(Double(burst.gain)) - 0.4
            #expect(abs(token.level - expected) < 1.5, "level \(token.level) dBFS, expected \(expected)")
        }
    }

    @Test(arguments: [-1_000.0, 1_000.0])
    func toleratesAThousandPPMClockOffsetAndAnEcho(ppm: Double) {
        var channel = Channel(seed: 11)
        // A sender whose clock runs `ppm` off: its burst, played at 48 kHz, is stretched or squeezed.
        let burst = TokenModulator(sampleRate: 48_000 * (1 + ppm * 1e-6)).waveform(for: token)
        let capture = channel.capture(length: 48_000, bursts: [(burst, 12_345, 0.2)],
                                      noiseRMS: (0.04 * power(burst) / 10 * 8).squareRoot(),
                                      echo: (delay: 240, gain: 0.3))
        #expect(decode(capture, chunks: &channel).map(\.token) == [token])
    }

    @Test func aBurstWithAWrongCRCYieldsNothing() {
        var channel = Channel(seed: 3)
        var information = CRC24.appending(to: token.bytes.flatMap { byte in (0..<8).map { (byte >> (7 - $0)) & 1 } })
        information[70] ^= 1
        let burst = TokenModulator(sampleRate: 48_000).waveform(symbols: Frame.symbols(information: information))
        let capture = channel.capture(length: 48_000, bursts: [(burst, 10_000, 0.5)], noiseRMS: 1e-4)
        #expect(decode(capture, chunks: &channel).isEmpty)
    }

    @Test func noiseAloneYieldsNothing() {
        var channel = Channel(seed: 5)
        for rms in [1e-4, 0.05, 0.5] {
            #expect(decode(channel.noise(count: 10 * 48_000, rms: rms), chunks: &channel).isEmpty)
        }
        // Nor does silence, nor samples that are not numbers.
        #expect(decode([Float](repeating: 0, count: 48_000) + [.nan, .infinity] + [Float](repeating: 0, count: 48_000),
                       chunks: &channel).isEmpty)
    }
}

@Suite struct WAVTests {
    @Test func aBurstSurvivesAWAVFile() throws {
        let burst = TokenModulator(sampleRate: 44_100).waveform(for: token)
        let file = try WAV.decode(WAV.encode(burst, sampleRate: 44_100))
        #expect(file.sampleRate == 44_100 && file.samples == burst)
    }

    @Test func badFilesAreNamed() {
        #expect(throws: WAV.Error.notWAV) { try WAV.decode(Data("hello".utf8)) }
        var truncated = WAV.encode([0.5, 0.25], sampleRate: 48_000)
        truncated.removeLast(3)
        #expect(throws: WAV.Error.truncated) { try WAV.decode(truncated) }
    }
}
