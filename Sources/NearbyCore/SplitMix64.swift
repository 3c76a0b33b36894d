#if canImport(Glibc)
import Glibc
#endif

/// A small seeded random generator (SplitMix64): simulated noise and random
/// tests that can be run again with the same outcome.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) {
        state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits.
    public mutating func nextUniform() -> Double {
        Double(next() >> 11) * 0x1p-53
    }

    /// Two independent standard normal samples (Box–Muller, both outputs).
    public mutating func nextGaussianPair() -> (Double, Double) {
        let radius = (-2 * log(1 - nextUniform())).squareRoot()  // 1 − u is in (0, 1]
        let angle = 2 * Double.pi * nextUniform()
        return (radius * cos(angle), radius * sin(angle))
    }

    /// A standard normal sample.
    public mutating func nextGaussian() -> Double {
        nextGaussianPair().0
    }
}
