import Foundation

/// Finds preambles in a stream: mixes the band down, filters and decimates it
/// to about 3 kHz, and correlates with the preamble's baseband.
///
/// The correlation is split into eight blocks that are summed with the phase
/// ramps of 13 trial frequency offsets (±24 Hz in 4 Hz steps): a clock offset
/// of 1000 ppm moves the carrier by 19 Hz, which would turn a single
/// correlation over the 53 ms preamble through a full cycle.
/// The strongest sum, over what the window's own power would give in noise
/// alone (there, a variable of mean about 1), is the detection metric: it
/// ignores the gain, and a loud burst does not deafen the detector to a
/// faint one right after it.
struct PreambleDetector: Sendable {
    /// A preamble heard: where its burst starts and at what offset.
    struct Candidate: Sendable {
        /// Raw sample index where the burst (its first guard bit) starts, ± one decimated sample.
        var burstStart: Double
        var frequencyOffset: Double
        var metric: Double
        /// Decimated index of the correlation window's end.
        var index: Int
    }

    static let frequencyOffsets = stride(from: -24.0, through: 24.0, by: 4).map { $0 }
    static let blocks = 8

    let decimation: Int
    let threshold: Double
    private let mixer: Mixer
    private let lowPass: [Float]
    private let templateRe: [Float], templateIm: [Float], templateEnergy: Float
    private let blockBounds: [Int]
    private let rampRe: [[Float]], rampIm: [[Float]]
    private let peakWindow: Int
    private let rawPerBurstStart: Double

    // Mixed samples waiting for the low-pass (doubled ring: contiguous windows).
    private var mixedRe: [Float], mixedIm: [Float]
    private var mixedCount = 0
    // Decimated samples (doubled rings).
    private var decimatedRe: [Float], decimatedIm: [Float]
    private var decimatedCount = 0
    // Per-sample scratch, kept so the 3 kHz loop allocates nothing.
    private var blockRe = [Float](repeating: 0, count: PreambleDetector.blocks)
    private var blockIm = [Float](repeating: 0, count: PreambleDetector.blocks)
    private var energies = [Float](repeating: 0, count: PreambleDetector.frequencyOffsets.count)
    private var peak: Candidate?

    init(sampleRate: Int, threshold: Double) {
        self.threshold = threshold
        decimation = max(1, sampleRate / 3_000)
        let rate = Double(sampleRate) / Double(decimation)
        mixer = Mixer(carrier: Int(MSK.carrier), sampleRate: sampleRate)
        lowPass = FIR.lowPass(cutoff: 1_000, sampleRate: Double(sampleRate), length: 2 * (96 * sampleRate / 48_000) + 1)

        let bitPeriod = 1 / MSK.bitRate
        let preamble = (0..<Frame.preambleBits).map { Frame.knownSymbols[Frame.preambleStart + $0]! }
        // Rotations j^k continue from the preamble's place in the burst.
        let shifted = [Float](repeating: 0, count: Frame.preambleStart) + preamble
        let length = Int((Double(Frame.preambleBits + 1) * bitPeriod * rate).rounded(.up))
        let offset = Double(Frame.preambleStart) * bitPeriod
        let template = (0..<length).map { MSK.baseband(shifted, at: offset + Double($0) / rate, bitPeriod: bitPeriod) }
        templateRe = template.map(\.re)
        templateIm = template.map(\.im)
        templateEnergy = template.reduce(0) { $0 + $1.re * $1.re + $1.im * $1.im }
        let bounds = (0...Self.blocks).map { $0 * length / Self.blocks }
        blockBounds = bounds
        let centres = (0..<Self.blocks).map { Double(bounds[$0] + bounds[$0 + 1]) / 2 / rate }
        rampRe = Self.frequencyOffsets.map { f in centres.map { Float(cos(2 * Double.pi * f * $0)) } }
        rampIm = Self.frequencyOffsets.map { f in centres.map { Float(-sin(2 * Double.pi * f * $0)) } }

        peakWindow = Int(0.010 * rate)
        // Decimated sample m is the low-pass output centred (taps − 1)/2 raw samples earlier.
        rawPerBurstStart = Double(Frame.preambleStart) * bitPeriod * Double(sampleRate)
        mixedRe = [Float](repeating: 0, count: 2 * lowPass.count)
        mixedIm = mixedRe
        decimatedRe = [Float](repeating: 0, count: 2 * length)
        decimatedIm = decimatedRe
    }

    var templateLength: Int { templateRe.count }

    /// Feeds the sample at raw index `index`; returns a candidate when a peak
    /// is over (no stronger one within 10 ms after it).
    mutating func consume(_ sample: Float, at index: Int) -> Candidate? {
        let taps = lowPass.count
        let slot = mixedCount % taps
        let phase = index % mixer.period
        mixedRe[slot] = sample * mixer.re[phase]
        mixedIm[slot] = sample * mixer.im[phase]
        mixedRe[slot + taps] = mixedRe[slot]
        mixedIm[slot + taps] = mixedIm[slot]
        mixedCount += 1
        guard index % decimation == 0, mixedCount >= taps else { return nil }

        // Low-pass output at this instant; the taps are symmetric, so order does not matter.
        var re: Float = 0, im: Float = 0
        let first = slot + 1
        lowPass.withUnsafeBufferPointer { h in
            mixedRe.withUnsafeBufferPointer { xr in
                mixedIm.withUnsafeBufferPointer { xi in
                    for j in 0..<taps {
                        re += h[j] * xr[first + j]
                        im += h[j] * xi[first + j]
                    }
                }
            }
        }
        return detect(re: re, im: im, rawIndex: index)
    }

    private mutating func detect(re: Float, im: Float, rawIndex: Int) -> Candidate? {
        let length = templateRe.count
        let slot = decimatedCount % length
        decimatedRe[slot] = re
        decimatedIm[slot] = im
        decimatedRe[slot + length] = re
        decimatedIm[slot + length] = im
        decimatedCount += 1
        guard decimatedCount >= length else { return nil }

        let first = slot + 1
        var windowPower: Float = 0
        templateRe.withUnsafeBufferPointer { tr in
            templateIm.withUnsafeBufferPointer { ti in
                decimatedRe.withUnsafeBufferPointer { xr in
                    decimatedIm.withUnsafeBufferPointer { xi in
                        for b in 0..<Self.blocks {
                            var sr: Float = 0, si: Float = 0
                            for i in blockBounds[b]..<blockBounds[b + 1] {
                                // x · conj(t)
                                sr += xr[first + i] * tr[i] + xi[first + i] * ti[i]
                                si += xi[first + i] * tr[i] - xr[first + i] * ti[i]
                                windowPower += xr[first + i] * xr[first + i] + xi[first + i] * xi[first + i]
                            }
                            blockRe[b] = sr
                            blockIm[b] = si
                        }
                    }
                }
            }
        }
        var best: Float = 0, bestOffset = 0
        for g in Self.frequencyOffsets.indices {
            var sr: Float = 0, si: Float = 0
            for b in 0..<Self.blocks {
                sr += blockRe[b] * rampRe[g][b] - blockIm[b] * rampIm[g][b]
                si += blockRe[b] * rampIm[g][b] + blockIm[b] * rampRe[g][b]
            }
            energies[g] = sr * sr + si * si
            if energies[g] > best { best = energies[g]; bestOffset = g }
        }
        let noise = windowPower / Float(length) * templateEnergy
        let metric = Double(best / max(noise, .leastNormalMagnitude))
        let index = decimatedCount - 1

        var finished: Candidate?
        if let current = peak, index - current.index > peakWindow {
            finished = current
            peak = nil
        }
        if metric > threshold, metric > peak?.metric ?? 0 {
            // Parabolic interpolation between the neighbouring trial offsets.
            var offset = Self.frequencyOffsets[bestOffset]
            if bestOffset > 0, bestOffset < energies.count - 1 {
                let (l, c, r) = (energies[bestOffset - 1], energies[bestOffset], energies[bestOffset + 1])
                let denominator = l - 2 * c + r
                if denominator < 0 { offset += Double(0.5 * (l - r) / denominator) * 4 }
            }
            let windowStart = rawIndex - (length - 1) * decimation
            let burstStart = Double(windowStart - (lowPass.count - 1) / 2) - rawPerBurstStart
            peak = Candidate(burstStart: burstStart, frequencyOffset: offset, metric: metric, index: index)
        }
        return finished
    }

    /// The peak being followed, at the end of the stream.
    mutating func flush() -> Candidate? {
        defer { peak = nil }
        return peak
    }
}
