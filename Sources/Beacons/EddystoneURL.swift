/// An Eddystone-URL frame: a compressed http(s) URL.
///
/// Wire layout (service data after the 0xFEAA UUID):
/// `10 | tx power | scheme prefix | encoded URL (0...17)`, so 3...20 bytes.
/// See ``encode(_:)`` and ``decode(_:)`` for the URL compression.
///
/// The frame's value is the decoded URL text, not its wire bytes: two
/// frames that spell the same URL with different expansion choices are
/// equal, and building always emits the shortest encoding.
public struct EddystoneURL: Hashable, Sendable {
    /// Calibrated transmit power at 0 m, in dBm. Not range-checked.
    public var txPower: Int8
    /// The full URL, e.g. `"https://goo.gl/S6zT6P"`.
    public let url: String
    /// `url`'s shortest encoding (scheme byte + encoded URL), computed
    /// once so that building cannot fail.
    private let encoded: [UInt8]

    /// Creates a URL frame, checking that `url` fits the encoding.
    /// - Throws: the errors of ``encode(_:)``.
    public init(txPower: Int8, url: String) throws(BeaconError) {
        self.init(txPower: txPower, url: url, encoded: try Self.encode(url))
    }

    private init(txPower: Int8, url: String, encoded: [UInt8]) {
        self.txPower = txPower
        self.url = url
        self.encoded = encoded
    }

    /// Parses Eddystone service data that must hold a URL frame of 3...20
    /// bytes with a known scheme byte and no reserved bytes in the URL.
    public init(serviceData: [UInt8]) throws(BeaconError) {
        self = try Self.parse(frame: serviceData[...]).get()
    }

    /// The parser proper; see ``BeaconFrame`` for why it returns a `Result`.
    static func parse(frame: ArraySlice<UInt8>) -> Result<Self, BeaconError> {
        if let problem = Eddystone.frameTypeProblem(.url, in: frame) { return .failure(problem) }
        guard BeaconKind.eddystoneURL.accepts(length: frame.count) else {
            return .failure(.invalidLength(.eddystoneURL, actual: frame.count))
        }
        let text: [UInt8]
        switch decodeText(frame.dropFirst(2)) {
        case let .success(decoded): text = decoded
        case let .failure(error): return .failure(error)
        }
        // Decoded text always has a scheme and only encodable bytes, and
        // its shortest encoding is no longer than the one just read.
        return .success(Self(
            txPower: frame.int8(at: 1),
            url: String(decoding: text, as: UTF8.self),
            encoded: shortestEncoding(of: text, schemes: matchingSchemes(text))))
    }

    /// The frame as Eddystone service data, using the shortest encoding.
    public var serviceData: [UInt8] {
        var out: [UInt8] = [Eddystone.FrameType.url.rawValue]
        out.reserveCapacity(2 + encoded.count)
        out.appendSigned(txPower)
        out.append(contentsOf: encoded)
        return out
    }

    /// A complete advertising payload carrying this frame.
    public var advertisingData: [UInt8] {
        Eddystone.advertisingData(frame: serviceData)
    }
}
