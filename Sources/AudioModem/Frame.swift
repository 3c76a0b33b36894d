import NearbyCore

/// What one burst carries and in which order: the 8-byte token and a CRC-24,
/// polar-coded to 256 bits, between a known preamble and known pilot groups.
///
///     guard(2) preamble(64) [data(64) pilot(4)] × 4 guard(2)   = 340 bits
///
/// The preamble finds the burst and its frequency; preamble and pilots
/// together give the phase and frequency across the whole burst, so every
/// data bit is detected coherently. The guard bits carry the fade in and out.
enum Frame {
    static let guardBits = 2
    static let preambleBits = 64
    static let pilotGroups = 4
    static let pilotBitsPerGroup = 4
    static let codewordBits = 256
    static let bitCount = 2 * guardBits + preambleBits + pilotGroups * pilotBitsPerGroup + codewordBits
    static let informationBits = Token.byteCount * 8 + CRC24.bitCount
    static let preambleStart = guardBits

    /// The code: designed for coded bits at about −3 dB Es/N0, the middle of
    /// the range where bursts are decided.
    static let code = PolarCode(length: codewordBits, informationBits: informationBits, designEsN0: 0.5)

    /// ±1 per bit; nil where the codeword goes.
    static let knownSymbols: [Float?] = {
        var sequence = MaximalLengthSequence()
        var symbols: [Float?] = Array(repeating: 1, count: guardBits)
        symbols += (0..<preambleBits).map { _ in sequence.next() }
        for _ in 0..<pilotGroups {
            symbols += Array(repeating: nil, count: codewordBits / pilotGroups)
            symbols += (0..<pilotBitsPerGroup).map { _ in sequence.next() }
        }
        symbols += Array(repeating: 1, count: guardBits)
        return symbols
    }()

    /// Indices of the bits that carry the codeword, in codeword order.
    static let dataPositions = knownSymbols.indices.filter { knownSymbols[$0] == nil }

    /// Indices of the preamble and pilot bits (the guard bits are faded, so left out).
    static let referencePositions = knownSymbols.indices.filter {
        knownSymbols[$0] != nil && $0 >= guardBits && $0 < bitCount - guardBits
    }

    /// The ±1 symbols of the burst that carries `token`.
    static func symbols(for token: Token) -> [Float] {
        let bits = token.bytes.flatMap { byte in (0..<8).map { (byte >> (7 - $0)) & 1 } }
        return symbols(information: CRC24.appending(to: bits))
    }

    /// The ±1 symbols of the burst that carries `information` (token and CRC bits).
    static func symbols(information: [UInt8]) -> [Float] {
        let codeword = code.encode(information)
        var symbols = knownSymbols
        for (position, bit) in zip(dataPositions, codeword) { symbols[position] = bit == 0 ? 1 : -1 }
        return symbols.map { $0! }
    }

    /// The token in decoded information bits, if their CRC holds.
    static func token(from information: [UInt8]) -> Token? {
        guard CRC24.isValid(information) else { return nil }
        let bytes = (0..<Token.byteCount).map { i in
            information[(8 * i)..<(8 * i + 8)].reduce(UInt8(0)) { $0 << 1 | $1 }
        }
        return Token(bytes: bytes)
    }
}

/// The length-63 m-sequence of x⁶ + x⁵ + 1, as ±1, repeating: a preamble
/// with flat autocorrelation and pilots that do not look like it.
private struct MaximalLengthSequence {
    private var register: UInt8 = 0b111111

    mutating func next() -> Float {
        let bit = ((register >> 5) ^ (register >> 4)) & 1
        register = ((register << 1) | bit) & 0b111111
        return bit == 0 ? 1 : -1
    }
}
