import Foundation
import NearbyCore

/// Turns a token into the samples of one burst: about 0.29 s of
/// near-ultrasonic MSK between 18.5 and 20 kHz.
///
/// The burst fades in and out over its guard bits, and a band-pass filter
/// keeps the power below 17 kHz more than 60 dB under the signal, so the burst
/// starts and stops without an audible click.
public struct TokenModulator: Sendable {
    /// Samples per second of the waveform (48 000 or 44 100 in practice).
    public let sampleRate: Double
    private let bandPass: [Float]

    /// Samples of the waveform before the frame's first bit (the band-pass
    /// filter's delay): where a receiver's `HeardToken.sampleOffset` points.
    public var leadIn: Int { (bandPass.count - 1) / 2 }

    public init(sampleRate: Double) {
        precondition(sampleRate >= 44_000, "the band reaches 20.5 kHz")
        self.sampleRate = sampleRate
        bandPass = FIR.bandPass(low: 17_900, high: 20_600, sampleRate: sampleRate,
                                length: 2 * Int(200 * sampleRate / 48_000) + 1)
    }

    /// The burst for `token`: mono samples with a peak of exactly 1 (full scale).
    public func waveform(for token: Token) -> [Float] {
        waveform(symbols: Frame.symbols(for: token))
    }

    /// The burst of any ±1 `symbols` laid out as a frame.
    func waveform(symbols: [Float]) -> [Float] {
        let bitPeriod = 1 / MSK.bitRate
        let duration = Double(symbols.count + 1) * bitPeriod
        let fade = Double(Frame.guardBits) * bitPeriod
        let count = Int((duration * sampleRate).rounded(.up))
        let omega = 2 * Double.pi * MSK.carrier / sampleRate
        var burst = (0..<count).map { n -> Float in
            let t = Double(n) / sampleRate
            let s = MSK.baseband(symbols, at: t, bitPeriod: bitPeriod)
            let carrier = Float(s.re) * Float(cos(omega * Double(n))) - Float(s.im) * Float(sin(omega * Double(n)))
            return carrier * Float(Self.fade(min(t, duration - t), over: fade))
        }
        burst = FIR.convolve(burst, bandPass)
        let peak = burst.reduce(0) { max($0, abs($1)) }
        return burst.map { $0 / peak }
    }

    /// Raised-cosine fade: 0 at the edge of the burst, 1 after `length` seconds.
    private static func fade(_ t: Double, over length: Double) -> Double {
        t >= length ? 1 : 0.5 - 0.5 * cos(Double.pi * max(t, 0) / length)
    }
}
