import Foundation

/// A polar code (Arıkan) with successive-cancellation list decoding aided by a
/// CRC (Tal and Vardy): at a few dozen information bits it comes within about
/// a decibel of the best any code of its size can do, where a convolutional
/// code of the same rate stands about 2 dB further off.
///
/// The transform pairs neighbouring positions at every stage: codeword
/// position 2β and 2β+1 at stage 1 carry (u ⊕ v, v) of the stage above.
struct PolarCode: Sendable {
    let length: Int
    let informationPositions: [Int]
    private let stages: Int
    private let frozen: [Bool]

    /// The `informationBits` most reliable positions of a length-`length`
    /// code on a channel with coded-bit `designEsN0` (linear), by the
    /// Bhattacharyya parameters of the synthetic channels.
    init(length: Int, informationBits: Int, designEsN0: Double) {
        precondition(length > 1 && length & (length - 1) == 0 && informationBits <= length)
        self.length = length
        stages = length.trailingZeroBitCount
        var z = [exp(-designEsN0)]
        for _ in 0..<stages {
            z = (0..<(z.count * 2)).map { phase in
                let parent = z[phase >> 1]
                return phase & 1 == 0 ? 2 * parent - parent * parent : parent * parent
            }
        }
        informationPositions = z.indices.sorted { z[$0] < z[$1] }.prefix(informationBits).sorted()
        var frozen = [Bool](repeating: true, count: length)
        for position in informationPositions { frozen[position] = false }
        self.frozen = frozen
    }

    /// The codeword (bits 0 or 1) for `information`, one bit per information position.
    func encode(_ information: [UInt8]) -> [UInt8] {
        precondition(information.count == informationPositions.count)
        var state = DecodingPath(stages: stages)
        var next = information.makeIterator()
        for phase in 0..<length {
            state.decide(phase, bit: frozen[phase] ? 0 : next.next()!, stages: stages)
        }
        return state.codeword(length: length)
    }

    /// The information bits of the most likely of `listSize` candidate
    /// codewords that `accept` takes (the CRC check), or nil when none does.
    /// `llr[i] > 0` favours codeword bit i = 0; the scale does not matter.
    func decode(_ llr: [Float], listSize: Int, accept: ([UInt8]) -> Bool) -> [UInt8]? {
        precondition(llr.count == length)
        var paths = [DecodingPath(stages: stages, channel: llr)]
        for phase in 0..<length {
            for i in paths.indices { paths[i].computeLLR(level: stages, phase: phase, stages: stages) }
            if frozen[phase] {
                for i in paths.indices {
                    paths[i].metric += penalty(paths[i].currentLLR(stages: stages), bit: 0)
                    paths[i].decide(phase, bit: 0, stages: stages)
                }
                continue
            }
            var candidates: [(metric: Float, path: Int, bit: UInt8)] = []
            for (i, path) in paths.enumerated() {
                let llr = path.currentLLR(stages: stages)
                candidates.append((path.metric + penalty(llr, bit: 0), i, 0))
                candidates.append((path.metric + penalty(llr, bit: 1), i, 1))
            }
            candidates.sort { $0.metric < $1.metric }
            paths = candidates.prefix(listSize).map { candidate in
                var path = paths[candidate.path]
                path.metric = candidate.metric
                path.decide(phase, bit: candidate.bit, stages: stages)
                return path
            }
        }
        for path in paths.sorted(by: { $0.metric < $1.metric }) {
            let information = informationPositions.map { path.decisions[$0] }
            if accept(information) { return information }
        }
        return nil
    }

    /// The path-metric increase for deciding `bit` against `llr`: min-sum
    /// throughout (this and the check-node rule), so the decoder needs no
    /// estimate of the noise: scaling every LLR changes no decision.
    private func penalty(_ llr: Float, bit: UInt8) -> Float {
        (llr < 0) == (bit == 0) ? abs(llr) : 0
    }
}

/// One candidate of the list decoder: the LLRs and partial sums of every
/// stage (Tal and Vardy's P and C arrays, flattened), and its decisions.
/// Stage λ holds 2^(stages−λ) LLRs and as many pairs of partial sums.
private struct DecodingPath {
    var llr: [Float]
    var partialSums: [UInt8]
    var decisions: [UInt8]
    var metric: Float = 0

    init(stages: Int, channel: [Float] = []) {
        let length = 1 << stages
        llr = [Float](repeating: 0, count: 2 * length)
        partialSums = [UInt8](repeating: 0, count: 4 * length)
        decisions = [UInt8](repeating: 0, count: length)
        for (i, value) in channel.enumerated() { llr[i] = value }
    }

    /// Stage λ starts at 2^(stages+1) − 2^(stages+1−λ) in `llr`, and at twice that in `partialSums`.
    private static func offset(_ level: Int, _ stages: Int) -> Int {
        (1 << (stages + 1)) - (1 << (stages + 1 - level))
    }

    func currentLLR(stages: Int) -> Float { llr[Self.offset(stages, stages)] }

    mutating func computeLLR(level: Int, phase: Int, stages: Int) {
        guard level > 0 else { return }
        if phase & 1 == 0 { computeLLR(level: level - 1, phase: phase >> 1, stages: stages) }
        let here = Self.offset(level, stages), below = Self.offset(level - 1, stages)
        let sums = 2 * here
        for beta in 0..<(1 << (stages - level)) {
            let a = llr[below + 2 * beta], b = llr[below + 2 * beta + 1]
            if phase & 1 == 0 {
                llr[here + beta] = (a < 0) != (b < 0) ? -min(abs(a), abs(b)) : min(abs(a), abs(b))
            } else {
                llr[here + beta] = partialSums[sums + 2 * beta] == 0 ? b + a : b - a
            }
        }
    }

    mutating func decide(_ phase: Int, bit: UInt8, stages: Int) {
        decisions[phase] = bit
        partialSums[2 * Self.offset(stages, stages) + (phase & 1)] = bit
        if phase & 1 == 1 { updatePartialSums(level: stages, phase: phase, stages: stages) }
    }

    private mutating func updatePartialSums(level: Int, phase: Int, stages: Int) {
        let parentPhase = phase >> 1
        let here = 2 * Self.offset(level, stages), below = 2 * Self.offset(level - 1, stages)
        for beta in 0..<(1 << (stages - level)) {
            let first = partialSums[here + 2 * beta], second = partialSums[here + 2 * beta + 1]
            partialSums[below + 4 * beta + (parentPhase & 1)] = first ^ second
            partialSums[below + 4 * beta + 2 + (parentPhase & 1)] = second
        }
        if parentPhase & 1 == 1 && level > 1 { updatePartialSums(level: level - 1, phase: parentPhase, stages: stages) }
    }

    /// The codeword once every phase is decided: stage 0's first partial sums.
    func codeword(length: Int) -> [UInt8] {
        (0..<length).map { partialSums[2 * $0] }
    }
}
