// The Eddystone-URL compression: a scheme prefix byte, then URL text in
// which bytes 0x00...0x0D stand for common top-level-domain endings.
//
// Loops index arrays directly rather than using generic algorithms
// (`starts(with:)`, `enumerated()`): unspecialised generics dominate
// the cost of this code in debug builds, where the fuzz test runs.

extension EddystoneURL {
    /// The most bytes an encoded URL may take after the scheme byte.
    public static let maxEncodedLength = 17

    /// Scheme prefixes, indexed by their byte value 0x00...0x03.
    static let schemePrefixes: [[UInt8]] = [
        "http://www.", "https://www.", "http://", "https://",
    ].map { Array($0.utf8) }

    /// Expansions, indexed by their byte value 0x00...0x0D.
    static let expansions: [[UInt8]] = [
        ".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/",
        ".com", ".org", ".edu", ".net", ".info", ".biz", ".gov",
    ].map { Array($0.utf8) }

    /// Bytes allowed literally in an encoded URL: printable ASCII except
    /// space. 0x0E...0x20 and 0x7F...0xFF are reserved.
    static let literalRange: ClosedRange<UInt8> = 0x21...0x7E

    /// Decodes a scheme byte followed by an encoded URL (the frame bytes
    /// after tx power) into the URL text.
    ///
    /// - Parameter bytes: 1...18 bytes: scheme prefix byte, then 0...17
    ///   bytes of encoded URL.
    /// - Throws: ``BeaconError/unknownURLScheme(_:)`` for a scheme byte
    ///   above 0x03, ``BeaconError/reservedURLByte(_:offset:)`` for a
    ///   reserved byte, and ``BeaconError/invalidLength(_:actual:)`` for a
    ///   wrong count (reported as the length of the whole frame, i.e.
    ///   `bytes.count + 2`, matching what the frame parser reports).
    public static func decode(_ bytes: [UInt8]) throws(BeaconError) -> String {
        String(decoding: try decodeText(bytes[...]).get(), as: UTF8.self)
    }

    /// `decode` without the String: the URL's UTF-8 bytes.
    static func decodeText(_ bytes: ArraySlice<UInt8>) -> Result<[UInt8], BeaconError> {
        guard (1...(1 + maxEncodedLength)).contains(bytes.count) else {
            return .failure(.invalidLength(.eddystoneURL, actual: bytes.count + 2))
        }
        let scheme = bytes.byte(at: 0)
        guard Int(scheme) < schemePrefixes.count else { return .failure(.unknownURLScheme(scheme)) }
        var text = schemePrefixes[Int(scheme)]
        for offset in 0..<(bytes.count - 1) {
            let byte = bytes.byte(at: offset + 1)
            if Int(byte) < expansions.count {
                text.append(contentsOf: expansions[Int(byte)])
            } else if literalRange.contains(byte) {
                text.append(byte)
            } else {
                return .failure(.reservedURLByte(byte, offset: offset))
            }
        }
        return .success(text)
    }

    /// Encodes `url` as a scheme byte followed by its shortest encoded form.
    ///
    /// Every scheme prefix that matches is tried and, for each, the fewest
    /// bytes covering the rest (a literal byte or an expansion at each
    /// position, chosen by dynamic programming). Matching is exact and
    /// case-sensitive, so `decode(encode(url)) == url` always holds.
    ///
    /// - Throws: ``BeaconError/unsupportedURLScheme(_:)`` unless `url`
    ///   starts with lowercase `http://` or `https://`;
    ///   ``BeaconError/unencodableURLCharacter(_:offset:)`` for a character
    ///   outside printable ASCII (0x21...0x7E; percent-encode such
    ///   characters first); ``BeaconError/urlTooLong(_:encodedLength:)``
    ///   when even the shortest encoding exceeds 17 bytes.
    public static func encode(_ url: String) throws(BeaconError) -> [UInt8] {
        let text = Array(url.utf8)
        let schemes = matchingSchemes(text)
        guard !schemes.isEmpty else { throw .unsupportedURLScheme(url) }
        try checkCharacters(text, of: url)
        let best = shortestEncoding(of: text, schemes: schemes)
        guard best.count - 1 <= maxEncodedLength else {
            throw .urlTooLong(url, encodedLength: best.count - 1)
        }
        return best
    }

    /// The scheme bytes whose prefix starts `text`.
    static func matchingSchemes(_ text: [UInt8]) -> [Int] {
        var schemes: [Int] = []
        for scheme in 0..<schemePrefixes.count where matches(text, at: 0, schemePrefixes[scheme]) {
            schemes.append(scheme)
        }
        return schemes
    }

    /// Rejects any byte that could not appear literally, naming the
    /// Unicode scalar it belongs to.
    private static func checkCharacters(_ text: [UInt8], of url: String) throws(BeaconError) {
        guard let bad = text.firstIndex(where: { !literalRange.contains($0) }) else { return }
        var offset = 0
        for scalar in url.unicodeScalars {
            let width = UTF8.width(scalar)
            if bad < offset + width { throw .unencodableURLCharacter(scalar, offset: offset) }
            offset += width
        }
        // Unreachable (the offset lies inside `url`); report the raw byte.
        throw .unencodableURLCharacter(Unicode.Scalar(text[bad]), offset: bad)
    }

    /// The shortest scheme byte + encoded URL for `text` among `schemes`
    /// (which must be non-empty; `text` must hold only literal bytes).
    static func shortestEncoding(of text: [UInt8], schemes: [Int]) -> [UInt8] {
        var best: [UInt8] = []
        for scheme in schemes {
            let candidate = [UInt8(scheme)] + shortestBody(text, from: schemePrefixes[scheme].count)
            if best.isEmpty || candidate.count < best.count { best = candidate }
        }
        return best
    }

    /// The fewest bytes that decode back to `text[start...]`: `cost[i]`
    /// is the shortest encoding of `text[i...]`, built from the end back.
    private static func shortestBody(_ text: [UInt8], from start: Int) -> [UInt8] {
        let n = text.count
        var cost = [Int](repeating: 0, count: n + 1)
        var step = [Int](repeating: 1, count: n + 1)   // characters consumed at i
        var code = [Int](repeating: -1, count: n + 1)  // expansion used at i, or -1
        var i = n - 1
        while i >= start {
            cost[i] = 1 + cost[i + 1]
            // Every expansion starts with ".", so only try them there.
            if text[i] == UInt8(ascii: ".") {
                for index in 0..<expansions.count where matches(text, at: i, expansions[index]) {
                    let length = expansions[index].count
                    let candidate = 1 + cost[i + length]
                    if candidate < cost[i] || (candidate == cost[i] && length > step[i]) {
                        cost[i] = candidate
                        step[i] = length
                        code[i] = index
                    }
                }
            }
            i -= 1
        }
        var out: [UInt8] = []
        out.reserveCapacity(cost[start])
        i = start
        while i < n {
            out.append(code[i] >= 0 ? UInt8(code[i]) : text[i])
            i += step[i]
        }
        return out
    }

    /// Whether `pattern` occurs in `text` at `offset`.
    private static func matches(_ text: [UInt8], at offset: Int, _ pattern: [UInt8]) -> Bool {
        guard text.count - offset >= pattern.count else { return false }
        for k in 0..<pattern.count where text[offset + k] != pattern[k] {
            return false
        }
        return true
    }
}
