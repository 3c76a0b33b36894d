import Foundation
import NearbyCore

/// Decodes one burst from the raw samples around a detected preamble.
///
/// The detector knows where the burst starts to within one decimated sample
/// and its carrier to within a few hertz. The decoder matched-filters the
/// preamble and pilot bits at full rate over a grid of start times and
/// residual offsets, keeps the pair that collects the most energy, and
/// repeats on a finer grid. A clock offset stretches the whole burst, so the
/// bit period follows the measured carrier (T' = T · fc / f). The phase
/// of the best fit then serves every data bit, the soft bits go to the polar
/// list decoder, and the CRC has the last word.
struct BurstDecoder: Sendable {
    struct Result: Sendable {
        var token: Token
        var burstStart: Double
        /// Received amplitude of the carrier relative to a full-scale tone, in dB.
        var level: Double
        /// Energy per bit over noise density, from the reference bits (dB).
        var bitSNR: Double
    }

    let sampleRate: Double
    let listSize: Int
    private let mixer: Mixer

    init(sampleRate: Int, listSize: Int) {
        self.sampleRate = Double(sampleRate)
        self.listSize = listSize
        mixer = Mixer(carrier: Int(MSK.carrier), sampleRate: sampleRate)
    }

    /// Samples from `burstStart − margin` through the burst's end (with slack
    /// for a slow clock).
    func span(of candidate: PreambleDetector.Candidate, margin: Int) -> Range<Int> {
        let length = Double(Frame.bitCount + 1) * sampleRate / MSK.bitRate * 1.002
        let first = Int(candidate.burstStart.rounded(.down)) - margin
        return first..<(first + Int(length) + 2 * margin + 2)
    }

    func decode(_ candidate: PreambleDetector.Candidate, margin: Int, history: SampleHistory) -> Result? {
        let span = span(of: candidate, margin: margin)
        var baseband = Baseband(start: span.lowerBound, count: span.count)
        for n in span {
            let x = history[n], phase = n % mixer.period
            baseband.re[n - span.lowerBound] = x * mixer.re[phase]
            baseband.im[n - span.lowerBound] = x * mixer.im[phase]
        }

        // Coarse: start within ± margin, residual offset within ± 6 Hz.
        var best = Fit(start: candidate.burstStart, frequency: candidate.frequencyOffset, energy: -1)
        for shift in stride(from: -margin, through: margin, by: 2) {
            let start = candidate.burstStart + Double(shift)
            best = bestFit(baseband, start: start, carrierOffset: candidate.frequencyOffset,
                           residuals: stride(from: -6.0, through: 6.0, by: 0.5), over: best)
        }
        // Fine: ± 2 samples, ± 0.75 Hz, with the bit period of the coarse offset.
        let coarse = best
        for shift in -2...2 {
            best = bestFit(baseband, start: coarse.start + Double(shift), carrierOffset: coarse.frequency,
                           residuals: stride(from: -0.75, through: 0.75, by: 0.05), over: best)
        }

        let bits = filtered(baseband, positions: Array(0..<Frame.bitCount), start: best.start, carrierOffset: best.frequency)
        // The burst's phase and amplitude: Σ z_k · b_k over the reference bits.
        var sumRe = 0.0, sumIm = 0.0
        for k in Frame.referencePositions {
            sumRe += Double(bits[k].re * Frame.knownSymbols[k]!)
            sumIm += Double(bits[k].im * Frame.knownSymbols[k]!)
        }
        let magnitude = max((sumRe * sumRe + sumIm * sumIm).squareRoot(), .leastNormalMagnitude)
        let amplitude = magnitude / Double(Frame.referencePositions.count)
        let (phaseRe, phaseIm) = (sumRe / magnitude, -sumIm / magnitude)
        /// The bit's matched-filter output turned to the burst's phase: ±amplitude plus noise.
        func aligned(_ k: Int) -> Double {
            Double(bits[k].re) * phaseRe - Double(bits[k].im) * phaseIm
        }

        let llr = Frame.dataPositions.map { Float(aligned($0)) }
        guard let information = Frame.code.decode(llr, listSize: listSize, accept: CRC24.isValid),
              let token = Frame.token(from: information) else { return nil }

        // Eb/N0 from how far the reference bits stray, in the real part only:
        // the imaginary part also holds the neighbours' pulses.
        var variance = 0.0
        for k in Frame.referencePositions {
            let deviation = aligned(k) * Double(Frame.knownSymbols[k]!) - amplitude
            variance += deviation * deviation
        }
        variance /= Double(Frame.referencePositions.count)
        let bitSamples = sampleRate / (MSK.bitRate * (1 + best.frequency / MSK.carrier))
        return Result(token: token, burstStart: best.start,
                      level: 20 * log10(max(2 * amplitude / bitSamples, 1e-12)),
                      bitSNR: 10 * log10(max(amplitude * amplitude / max(2 * variance, 1e-30), 1e-12)))
    }

    private struct Baseband {
        let start: Int
        var re: [Float], im: [Float]
        init(start: Int, count: Int) {
            self.start = start
            re = [Float](repeating: 0, count: count)
            im = re
        }
    }

    private struct Fit {
        var start: Double, frequency: Double, energy: Double
    }

    /// `best`, or the fit at `start` with the best of `residuals` if it collects more reference energy.
    private func bestFit(_ baseband: Baseband, start: Double, carrierOffset: Double,
                         residuals: StrideThrough<Double>, over best: Fit) -> Fit {
        let references = Frame.referencePositions
        let z = filtered(baseband, positions: references, start: start, carrierOffset: carrierOffset)
        let bitSamples = sampleRate / (MSK.bitRate * (1 + carrierOffset / MSK.carrier))
        var best = best
        for residual in residuals {
            var re = 0.0, im = 0.0
            for (i, k) in references.enumerated() {
                let symbol = Double(Frame.knownSymbols[k]!)
                let angle = -2 * Double.pi * residual * Double(k) * bitSamples / sampleRate
                let (c, s) = (cos(angle), sin(angle))
                re += symbol * (Double(z[i].re) * c - Double(z[i].im) * s)
                im += symbol * (Double(z[i].re) * s + Double(z[i].im) * c)
            }
            let energy = re * re + im * im
            if energy > best.energy {
                best = Fit(start: start, frequency: carrierOffset + residual, energy: energy)
            }
        }
        return best
    }

    /// Matched-filter outputs of the bits at `positions`, derotated by j^−k
    /// and by the carrier offset: each is b_k · A · e^{jθ} plus noise.
    private func filtered(_ baseband: Baseband, positions: [Int], start: Double, carrierOffset: Double) -> [(re: Float, im: Float)] {
        let bitSamples = sampleRate / (MSK.bitRate * (1 + carrierOffset / MSK.carrier))
        let step = Double.pi / (2 * bitSamples)
        return positions.map { k in
            let t = start + Double(k) * bitSamples - Double(baseband.start)
            let first = max(0, Int(t.rounded(.up)))
            let last = min(baseband.re.count - 1, Int((t + 2 * bitSamples).rounded(.down)))
            var re: Float = 0, im: Float = 0
            if first <= last {
                // sin(step · (n − t)) by rotation from the first sample.
                var s = sin(step * (Double(first) - t)), c = cos(step * (Double(first) - t))
                let (ds, dc) = (sin(step), cos(step))
                for n in first...last {
                    re += baseband.re[n] * Float(s)
                    im += baseband.im[n] * Float(s)
                    (s, c) = (s * dc + c * ds, c * dc - s * ds)
                }
            }
            let angle = -2 * Double.pi * carrierOffset * Double(k) * bitSamples / sampleRate
            let (ca, sa) = (Float(cos(angle)), Float(sin(angle)))
            let r = MSK.rotation(k)
            // × conj(j^k) × e^{j·angle}
            let (dr, di) = (re * r.re + im * r.im, im * r.re - re * r.im)
            return (dr * ca - di * sa, dr * sa + di * ca)
        }
    }
}
