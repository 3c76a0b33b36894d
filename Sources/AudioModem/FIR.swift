import Foundation

/// Linear-phase FIR filters by the window method (Blackman window: stop band
/// about 74 dB down, transition about 5.5 × sampleRate / length wide).
enum FIR {
    /// A low-pass filter with unit gain at 0 Hz.
    static func lowPass(cutoff: Double, sampleRate: Double, length: Int) -> [Float] {
        let taps = windowedSinc(length: length) { 2 * cutoff / sampleRate * sinc(2 * cutoff / sampleRate * $0) }
        let gain = taps.reduce(0, +)
        return taps.map { Float($0 / gain) }
    }

    /// A band-pass filter with unit gain at the middle of the band.
    static func bandPass(low: Double, high: Double, sampleRate: Double, length: Int) -> [Float] {
        let taps = windowedSinc(length: length) { t in
            2 * high / sampleRate * sinc(2 * high / sampleRate * t) - 2 * low / sampleRate * sinc(2 * low / sampleRate * t)
        }
        // Gain at the centre frequency: |Σ h[n] e^{-jωn}|.
        let omega = 2 * Double.pi * (low + high) / 2 / sampleRate
        var re = 0.0, im = 0.0
        for (n, tap) in taps.enumerated() {
            re += tap * cos(omega * Double(n))
            im -= tap * sin(omega * Double(n))
        }
        let gain = (re * re + im * im).squareRoot()
        return taps.map { Float($0 / gain) }
    }

    /// The full convolution of `signal` with `taps` (length signal + taps − 1).
    static func convolve(_ signal: [Float], _ taps: [Float]) -> [Float] {
        guard !signal.isEmpty, !taps.isEmpty else { return [] }
        var out = [Float](repeating: 0, count: signal.count + taps.count - 1)
        out.withUnsafeMutableBufferPointer { out in
            for (i, x) in signal.enumerated() where x != 0 {
                for (j, h) in taps.enumerated() { out[i + j] += x * h }
            }
        }
        return out
    }

    /// `ideal(t)` for t measured in samples from the filter's centre, windowed.
    private static func windowedSinc(length: Int, _ ideal: (Double) -> Double) -> [Double] {
        precondition(length >= 3 && length % 2 == 1, "an odd length keeps the delay a whole number of samples")
        let centre = Double(length - 1) / 2
        return (0..<length).map { n in
            let x = 2 * Double.pi * Double(n) / Double(length - 1)
            let blackman = 0.42 - 0.5 * cos(x) + 0.08 * cos(2 * x)
            return ideal(Double(n) - centre) * blackman
        }
    }

    private static func sinc(_ x: Double) -> Double {
        x == 0 ? 1 : sin(Double.pi * x) / (Double.pi * x)
    }
}
