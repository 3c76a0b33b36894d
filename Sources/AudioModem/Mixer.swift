import Foundation

/// e^(−j·2π·carrier·n / sampleRate) by table: the carrier and the sample rate
/// are whole numbers of hertz, so the sequence repeats every
/// sampleRate / gcd(carrier, sampleRate) samples and stays exact however
/// long the stream runs.
struct Mixer: Sendable {
    let re: [Float]
    let im: [Float]

    init(carrier: Int, sampleRate: Int) {
        var (a, b) = (carrier, sampleRate)
        while b != 0 { (a, b) = (b, a % b) }
        let period = sampleRate / a
        let omega = 2 * Double.pi * Double(carrier) / Double(sampleRate)
        re = (0..<period).map { Float(cos(omega * Double($0))) }
        im = (0..<period).map { Float(-sin(omega * Double($0))) }
    }

    var period: Int { re.count }
}

/// The newest samples of a stream, addressed by their index since the start.
struct SampleHistory: Sendable {
    private var samples: [Float]
    private let mask: Int
    /// Index of the next sample to arrive.
    private(set) var end = 0

    init(seconds: Double, sampleRate: Int) {
        let capacity = 1 << Int(log2(seconds * Double(sampleRate)).rounded(.up))
        samples = [Float](repeating: 0, count: capacity)
        mask = capacity - 1
    }

    mutating func append(_ sample: Float) {
        samples[end & mask] = sample
        end += 1
    }

    /// The sample at `index`, or 0 outside what is kept.
    subscript(index: Int) -> Float {
        index < end && index >= end - samples.count && index >= 0 ? samples[index & mask] : 0
    }
}
