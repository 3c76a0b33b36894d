@testable import AudioModem
import Foundation
import NearbyCore

/// A seeded acoustic channel for the tests: gain, echoes and white noise,
/// with the same noise for the same seed.
struct Channel {
    private var random: SplitMix64

    init(seed: UInt64) { random = SplitMix64(seed: seed) }

    /// Uniform in [0, 1).
    mutating func uniform() -> Double { random.nextUniform() }

    /// Standard normal.
    mutating func gaussian() -> Double { random.nextGaussian() }

    mutating func noise(count: Int, rms: Double) -> [Float] {
        (0..<count).map { _ in Float(rms * gaussian()) }
    }

    /// `bursts` at their offsets, scaled, with an echo, over white noise.
    mutating func capture(length: Int, bursts: [(samples: [Float], offset: Int, gain: Float)], noiseRMS: Double,
                          echo: (delay: Int, gain: Float)? = nil) -> [Float] {
        var out = noise(count: length, rms: noiseRMS)
        for burst in bursts {
            for (i, x) in burst.samples.enumerated() where burst.offset + i < length {
                out[burst.offset + i] += burst.gain * x
                if let echo, burst.offset + i + echo.delay < length {
                    out[burst.offset + i + echo.delay] += burst.gain * echo.gain * x
                }
            }
        }
        return out
    }
}

/// Mean power of `signal`.
func power(_ signal: [Float]) -> Double {
    signal.reduce(0) { $0 + Double($1) * Double($1) } / Double(max(signal.count, 1))
}

/// Energy of `signal` after `taps` (a filter of the module's own design).
func energy(of signal: [Float], through taps: [Float]) -> Double {
    FIR.convolve(signal, taps).reduce(0) { $0 + Double($1) * Double($1) }
}
