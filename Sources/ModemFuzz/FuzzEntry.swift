// Coverage-guided fuzzing of the audio modem's streaming receiver
// (Sources/AudioModem: TokenDemodulator, the one nearbyd runs on the
// microphone) on samples of any value and blocks of any size; plus a plain
// replay runner for builds without the fuzzer (README.md).

import AudioModem
import Foundation
import FuzzReplay
import NearbyCore

/// An input is a header, then what the microphone hears:
///
/// - byte 0: the sample rate (even: 48 000 Hz, odd: 44 100 Hz) and what
///   follows (by its value / 2 modulo 3): 0, raw samples; 1, noise; 2, a burst;
/// - byte 1: the block size the samples come in (0: all at once; N: N samples);
/// - raw: little-endian Float32 samples, any bit pattern (NaN, infinities,
///   denormals, huge values);
/// - noise: a seed (8 bytes), a level (one byte, 0 to −127 dBFS), a length
///   (one byte, in 10 ms), then samples to overwrite, 5 bytes each (a 16-bit
///   position in the stream and a Float32);
/// - a burst: a token (8 bytes), then as noise; the token's waveform is
///   played at full scale 0.1 s in, over that noise.
///
/// Properties: the receiver never traps, whatever the samples; it hears the
/// same tokens however the stream is cut into blocks; it hears no token in
/// noise, and no other token than the one played (the modem's documented
/// false-positive rate, doc/audio-modem.md, makes either about 10⁻⁷ per
/// input: a finding here is worth reproducing before it is believed).
enum FuzzProperty {
    /// Checks the properties; returns the tokens heard.
    @discardableResult
    static func check(_ input: [UInt8]) -> [HeardToken] {
        var bytes = input[...]
        func byte() -> UInt8 { bytes.popFirst() ?? 0 }
        let header = byte()
        let sampleRate = header & 1 == 0 ? 48_000 : 44_100
        let blockSize = Int(byte())
        var expected: Set<Token> = []
        let samples: [Float]
        switch header / 2 % 3 {
        case 0:
            samples = stride(from: bytes.startIndex, to: bytes.endIndex - 3, by: 4).map {
                Float(bitPattern: UInt32(bytes[$0]) | UInt32(bytes[$0 + 1]) << 8 | UInt32(bytes[$0 + 2]) << 16 | UInt32(bytes[$0 + 3]) << 24)
            }
        case 1:
            samples = noise(sampleRate: sampleRate, &bytes)
        default:
            let token = Token(bytes: (0..<Token.byteCount).map { _ in byte() })!
            var stream = noise(sampleRate: sampleRate, &bytes)
            let waveform = TokenModulator(sampleRate: Double(sampleRate)).waveform(for: token)
            let start = sampleRate / 10
            if stream.count < start + waveform.count { stream += [Float](repeating: 0, count: start + waveform.count - stream.count) }
            for (index, sample) in waveform.enumerated() { stream[start + index] += sample }
            samples = stream
            expected = [token]
        }
        let whole = hear(samples, sampleRate: sampleRate, blockSize: 0)
        if blockSize != 0 {
            let cut = hear(samples, sampleRate: sampleRate, blockSize: blockSize)
            guard cut == whole else { fatalError("blocks of \(blockSize) samples heard \(cut), one block \(whole)") }
        }
        if header / 2 % 3 != 0 {
            for heard in whole where !expected.contains(heard.token) {
                fatalError("heard \(heard.token) in what carried \(expected.isEmpty ? "no token" : "\(expected)")")
            }
        }
        return whole
    }

    /// White Gaussian noise from the input's seed, level and length, with the
    /// input's samples written over it.
    static func noise(sampleRate: Int, _ bytes: inout ArraySlice<UInt8>) -> [Float] {
        func byte() -> UInt8 { bytes.popFirst() ?? 0 }
        var random = SplitMix64(seed: (0..<8).reduce(0) { seed, _ in seed << 8 | UInt64(byte()) })
        let rms = Float(pow(10, -Double(byte() % 128) / 20))
        let count = Int(byte()) * sampleRate / 100
        var samples = (0..<count).map { _ in rms * Float(random.nextGaussian()) }
        while bytes.count >= 6 {
            let position = Int(byte()) << 8 | Int(byte())
            let value = Float(bitPattern: (0..<4).reduce(0) { bits, _ in bits << 8 | UInt32(byte()) })
            if position < samples.count { samples[position] = value }
        }
        return samples
    }

    /// What a fresh receiver hears in `samples` given `blockSize` at a time (0: all at once), to the end.
    static func hear(_ samples: [Float], sampleRate: Int, blockSize: Int) -> [HeardToken] {
        var demodulator = TokenDemodulator(sampleRate: sampleRate)
        var heard: [HeardToken] = []
        let size = blockSize == 0 ? max(samples.count, 1) : blockSize
        for start in stride(from: 0, to: samples.count, by: size) {
            heard += demodulator.process(samples[start..<min(start + size, samples.count)])
        }
        return heard + demodulator.finish()
    }
}

/// libFuzzer's driver when built for fuzzing, else a replay of the inputs
/// named on the command line (FuzzHarness) that counts those heard as a token.
@main
enum Main {
    static func main() {
        FuzzHarness.main("modem-fuzz", property: { _ = FuzzProperty.check($0) }) { paths in
            var heard = 0
            let count = try FuzzReplay.run(paths) { input in
                if !FuzzProperty.check(input).isEmpty { heard += 1 }
            }
            return "replayed \(count) inputs, no property violations; a token was heard in \(heard) of them"
        }
    }
}
