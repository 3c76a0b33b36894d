import Foundation

/// Minimum-shift keying, written as offset QPSK with half-sine pulses:
/// s(t) = Σ b_k · j^k · p(t − kT), p(t) = sin(πt / 2T) on [0, 2T).
/// Two pulses overlap at any time, one real and one imaginary, with
/// amplitudes sin and cos of the same angle: the envelope is constant, so a
/// burst's peak-to-average power ratio is a pure tone's 3 dB, and a coherent
/// receiver that matched-filters each pulse sees every bit as BPSK with its
/// full energy and no interference from its neighbours.
enum MSK {
    /// The carrier, in the middle of the 18.0–20.5 kHz band.
    static let carrier = 19_250.0
    /// Bits per second: the main lobe spans carrier ± 0.75 × 1200 Hz.
    static let bitRate = 1_200.0

    /// The half-sine pulse at `t` seconds into a pulse `2 × bitPeriod` long.
    static func pulse(_ t: Double, bitPeriod: Double) -> Double {
        t < 0 || t >= 2 * bitPeriod ? 0 : sin(Double.pi * t / (2 * bitPeriod))
    }

    /// j^k as (re, im).
    static func rotation(_ k: Int) -> (re: Float, im: Float) {
        switch k & 3 {
        case 0: (1, 0)
        case 1: (0, 1)
        case 2: (-1, 0)
        default: (0, -1)
        }
    }

    /// The complex baseband of `symbols` at time `t` (seconds from the first pulse).
    static func baseband(_ symbols: [Float], at t: Double, bitPeriod: Double) -> (re: Float, im: Float) {
        let last = Int((t / bitPeriod).rounded(.down))
        var re: Float = 0, im: Float = 0
        for k in (last - 1)...last where k >= 0 && k < symbols.count {
            let amplitude = symbols[k] * Float(pulse(t - Double(k) * bitPeriod, bitPeriod: bitPeriod))
            let r = rotation(k)
            re += amplitude * r.re
            im += amplitude * r.im
        }
        return (re, im)
    }
}
