import Testing
@testable import Beacons

@Suite("Eddystone-URL encoding")
struct EddystoneURLCodingTests {
    @Test func specExampleGooGl() throws {
        #expect(try EddystoneURL.encode("https://goo.gl/S6zT6P") == Vectors.gooGlEncoded)
        #expect(try EddystoneURL.decode(Vectors.gooGlEncoded) == "https://goo.gl/S6zT6P")
    }

    @Test func googleWithWWWAndComSlash() throws {
        #expect(try EddystoneURL.encode("http://www.google.com/") == Vectors.googleEncoded)
        #expect(try EddystoneURL.decode(Vectors.googleEncoded) == "http://www.google.com/")
    }

    @Test(arguments: [
        // (url, hand-encoded bytes)
        ("http://www.a", [0x00, 0x61] as [UInt8]),
        ("https://www.a", [0x01, 0x61]),
        ("http://a", [0x02, 0x61]),
        ("https://", [0x03]),
        ("https://www.a.com/", [0x01, 0x61, 0x00]),        // www prefix + ".com/" beats literal
        ("http://x.org/y.org", [0x02, 0x78, 0x01, 0x79, 0x08]),
        ("https://e.edu/.net/.info/", [0x03, 0x65, 0x02, 0x03, 0x04]),
        ("https://b.biz.gov", [0x03, 0x62, 0x0C, 0x0D]),
        ("https://b.biz/a.gov/c.info", [0x03, 0x62, 0x05, 0x61, 0x06, 0x63, 0x0B]),
        ("https://n.net.com.edu", [0x03, 0x6E, 0x0A, 0x07, 0x09]),
        ("https://x.co", [0x03, 0x78, 0x2E, 0x63, 0x6F]),  // ".co" is no expansion
        ("https://~!", [0x03, 0x7E, 0x21]),               // edges of the literal range
    ])
    func encodesShortestAndDecodesBack(url: String, bytes: [UInt8]) throws {
        #expect(try EddystoneURL.encode(url) == bytes)
        #expect(try EddystoneURL.decode(bytes) == url)
    }

    @Test func longestEncodableURL() throws {
        // 16 letters + ".com" (1 byte) = 17 bytes: fits exactly.
        let url = "https://abcdefghijklmnop.com"
        #expect(try EddystoneURL.encode(url).count == 18)
        #expect(throws: BeaconError.urlTooLong("https://abcdefghijklmnopq.com", encodedLength: 18)) {
            try EddystoneURL.encode("https://abcdefghijklmnopq.com")
        }
    }

    @Test func nonCanonicalWireFormDecodes() throws {
        // "http://" + literal "www.google" + ".com/": legal, just not shortest.
        let bytes: [UInt8] = [0x02, 0x77, 0x77, 0x77, 0x2E, 0x67, 0x6F, 0x6F, 0x67, 0x6C, 0x65, 0x00]
        #expect(try EddystoneURL.decode(bytes) == "http://www.google.com/")
    }

    @Test(arguments: ["ftp://a.com", "HTTP://a.com", "https:/a", "", "www.google.com"])
    func rejectsUnsupportedSchemes(url: String) {
        #expect(throws: BeaconError.unsupportedURLScheme(url)) { try EddystoneURL.encode(url) }
    }

    @Test func rejectsUnencodableCharacters() {
        #expect(throws: BeaconError.unencodableURLCharacter(" ", offset: 9)) {
            try EddystoneURL.encode("https://a b")
        }
        #expect(throws: BeaconError.unencodableURLCharacter("é", offset: 8)) {
            try EddystoneURL.encode("https://é")
        }
        #expect(throws: BeaconError.unencodableURLCharacter("\u{7F}", offset: 10)) {
            try EddystoneURL.encode("https://ab\u{7F}")
        }
    }

    @Test(arguments: [0x0E, 0x10, 0x20, 0x7F, 0x80, 0xFF] as [UInt8])
    func rejectsReservedBytes(byte: UInt8) {
        #expect(throws: BeaconError.reservedURLByte(byte, offset: 1)) {
            try EddystoneURL.decode([0x03, 0x61, byte, 0x62])
        }
    }

    @Test(arguments: [0x04, 0x10, 0xFF] as [UInt8])
    func rejectsUnknownSchemeBytes(scheme: UInt8) {
        #expect(throws: BeaconError.unknownURLScheme(scheme)) { try EddystoneURL.decode([scheme, 0x61]) }
    }

    @Test func decodeChecksLength() {
        #expect(throws: BeaconError.invalidLength(.eddystoneURL, actual: 2)) { try EddystoneURL.decode([]) }
        let tooLong = [0x03] + [UInt8](repeating: 0x61, count: 18)
        #expect(throws: BeaconError.invalidLength(.eddystoneURL, actual: 21)) { try EddystoneURL.decode(tooLong) }
    }
}

@Suite("Eddystone-URL frame")
struct EddystoneURLFrameTests {
    @Test func parsesFrame() throws {
        let frame = try EddystoneURL(serviceData: Vectors.urlFrame)
        #expect(frame.txPower == -18)
        #expect(frame.url == "https://goo.gl/S6zT6P")
        #expect(frame.serviceData == Vectors.urlFrame)
    }

    @Test func emptyEncodedURLIsAllowed() throws {
        // The spec gives the encoded URL a length of 0-17.
        let frame = try EddystoneURL(serviceData: [0x10, 0x00, 0x02])
        #expect(frame.url == "http://")
    }

    @Test func nonCanonicalFrameEqualsCanonical() throws {
        let longForm = try EddystoneURL(serviceData: [0x10, 0x00, 0x02, 0x77, 0x77, 0x77, 0x2E, 0x61, 0x07])
        let built = try EddystoneURL(txPower: 0, url: "http://www.a.com")
        #expect(longForm == built)
        #expect(longForm.serviceData == [0x10, 0x00, 0x00, 0x61, 0x07])
    }

    @Test(arguments: [1, 2, 21, 22])
    func rejectsBadLengths(length: Int) {
        let frame = Array(([0x10, 0x00, 0x03] + [UInt8](repeating: 0x61, count: 19)).prefix(length))
        #expect(throws: BeaconError.invalidLength(.eddystoneURL, actual: length)) {
            try EddystoneURL(serviceData: frame)
        }
    }

    @Test func rejectsReservedByteInFrame() {
        #expect(throws: BeaconError.reservedURLByte(0x20, offset: 0)) {
            try EddystoneURL(serviceData: [0x10, 0x00, 0x03, 0x20])
        }
    }

    @Test func initRejectsUnencodableURL() {
        #expect(throws: BeaconError.unsupportedURLScheme("mailto:x@y.z")) {
            try EddystoneURL(txPower: 0, url: "mailto:x@y.z")
        }
    }

    @Test func buildsAndParsesAdvertisement() throws {
        let frame = try EddystoneURL(txPower: -18, url: "https://goo.gl/S6zT6P")
        #expect(frame.advertisingData == Vectors.eddystoneAdvertisement(Vectors.urlFrame))
        #expect(try BeaconFrame(advertisingData: frame.advertisingData) == .eddystoneURL(frame))
        #expect(BeaconFrame.parse(advertisingData: frame.advertisingData)?.advertisedID == nil)
    }
}
