import NearbyCore

/// A token heard in a stream.
public struct HeardToken: Sendable, Equatable {
    public let token: Token
    /// Where the burst's first bit starts, in samples since the demodulator's
    /// first sample (``TokenModulator/leadIn`` after the waveform's first sample).
    public let sampleOffset: Int
    /// The received carrier's amplitude relative to a full-scale tone (dBFS):
    /// what distance estimates start from.
    public let level: Double
    /// Energy per bit over noise density (dB), from the preamble and pilots.
    public let bitSNR: Double
}

/// The streaming receiver: feed it samples in chunks of any size, as they
/// are captured, and it reports each token whose burst it decodes.
///
/// It finds bursts anywhere in the stream, at any gain, with the sample clocks
/// of sender and receiver up to ±1000 ppm apart, and with echoes; a token is
/// reported only when its CRC-24 holds, so noise yields nothing.
/// One value belongs to one capture stream and whoever owns it.
public struct TokenDemodulator: Sendable {
    /// The detection threshold the modem is measured with: about one false
    /// preamble a minute in white noise, each one then rejected by the CRC.
    public static let defaultThreshold = 16.0
    /// The list size of the polar decoder: 8 candidates, checked by the CRC.
    public static let defaultListSize = 32

    public let sampleRate: Int
    private var detector: PreambleDetector
    private let decoder: BurstDecoder
    private var history: SampleHistory
    private var pending: [PreambleDetector.Candidate] = []
    /// Bursts already decoded: a later preamble inside one (an echo, a
    /// correlation side lobe) is not decoded again.
    private var decoded: [Range<Double>] = []

    /// - Parameters:
    ///   - sampleRate: of the stream, in hertz (48 000 or 44 100 in practice).
    ///   - threshold: the detection metric a preamble must reach, in multiples
    ///     of the noise (a lower one hears fainter bursts and decodes more noise).
    ///   - listSize: candidates the polar decoder keeps.
    public init(sampleRate: Int, threshold: Double = defaultThreshold, listSize: Int = defaultListSize) {
        precondition(sampleRate >= 44_000, "the band reaches 20.5 kHz")
        self.sampleRate = sampleRate
        detector = PreambleDetector(sampleRate: sampleRate, threshold: threshold)
        decoder = BurstDecoder(sampleRate: sampleRate, listSize: listSize)
        history = SampleHistory(seconds: 2, sampleRate: sampleRate)
    }

    /// Feeds the next samples; returns the tokens whose bursts are complete.
    public mutating func process(_ samples: some Sequence<Float>) -> [HeardToken] {
        var heard: [HeardToken] = []
        for sample in samples {
            let index = history.end, clean = sample.isFinite ? sample : 0
            history.append(clean)
            if let candidate = detector.consume(clean, at: index) { pending.append(candidate) }
            if let first = pending.first, decoder.span(of: first, margin: detector.decimation).upperBound <= history.end {
                heard += decodePending(upTo: history.end)
            }
        }
        return heard
    }

    /// Decodes what is left at the end of the stream, as if silence followed.
    public mutating func finish() -> [HeardToken] {
        if let candidate = detector.flush() { pending.append(candidate) }
        return decodePending(upTo: .max)
    }

    private mutating func decodePending(upTo end: Int) -> [HeardToken] {
        var heard: [HeardToken] = []
        while let candidate = pending.first, decoder.span(of: candidate, margin: detector.decimation).upperBound <= end {
            pending.removeFirst()
            let start = candidate.burstStart
            if decoded.contains(where: { $0.contains(start) }) { continue }
            guard let result = decoder.decode(candidate, margin: detector.decimation, history: history) else { continue }
            let length = Double(decoder.span(of: candidate, margin: 0).count)
            decoded = decoded.filter { $0.upperBound > start - length } + [(result.burstStart - length / 2)..<(result.burstStart + length)]
            heard.append(HeardToken(token: result.token, sampleOffset: Int(result.burstStart.rounded()),
                                    level: result.level, bitSNR: result.bitSNR))
        }
        return heard
    }
}
