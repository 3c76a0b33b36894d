import Testing
@testable import Beacons

@Suite("Eddystone-UID")
struct EddystoneUIDTests {
    @Test func parsesTwentyByteFrame() throws {
        let uid = try EddystoneUID(serviceData: Vectors.uidFrame)
        #expect(uid.txPower == -20)
        #expect(uid.namespace.bytes == Vectors.namespaceBytes)
        #expect(uid.namespace.hex == "8b0ca750095477cb3e77")
        #expect(uid.instance.bytes == Vectors.instanceBytes)
    }

    @Test func acceptsEighteenByteFrameWithoutRFU() throws {
        let short = try EddystoneUID(serviceData: Vectors.uidFrameWithoutRFU)
        #expect(short == (try EddystoneUID(serviceData: Vectors.uidFrame)))
        // Built frames always carry the RFU bytes.
        #expect(short.serviceData == Vectors.uidFrame)
    }

    @Test(arguments: [0, 1, 2, 17, 19, 21, 31])
    func rejectsOtherLengths(length: Int) {
        var frame = Vectors.uidFrame + [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]
        frame = Array(frame.prefix(length))
        let expected: BeaconError = length == 0
            ? .emptyEddystoneFrame : .invalidLength(.eddystoneUID, actual: length)
        #expect(throws: expected) { try EddystoneUID(serviceData: frame) }
    }

    @Test func rejectsNonZeroRFU() {
        var frame = Vectors.uidFrame
        frame[19] = 0x01
        #expect(throws: BeaconError.uidReservedBytesNotZero(0x00, 0x01)) {
            try EddystoneUID(serviceData: frame)
        }
    }

    @Test func rejectsOtherFrameType() {
        #expect(throws: BeaconError.unexpectedEddystoneFrameType(expected: .eddystoneUID, actual: 0x20)) {
            try EddystoneUID(serviceData: Vectors.tlmFrame)
        }
    }

    @Test func buildsSpecAdvertisement() throws {
        let uid = EddystoneUID(
            txPower: -20,
            namespace: try EddystoneNamespace(hex: "8b0ca750095477cb3e77"),
            instance: try EddystoneInstance(bytes: Vectors.instanceBytes))
        #expect(uid.serviceData == Vectors.uidFrame)
        #expect(uid.advertisingData == Vectors.uidAdvertisement)
        #expect(uid.advertisingData.count == 31)
        #expect(try BeaconFrame(advertisingData: uid.advertisingData) == .eddystoneUID(uid))
    }

    @Test func identifierTypesCheckLengths() {
        #expect(throws: BeaconError.invalidIdentifierLength(expected: 10, actual: 9)) {
            try EddystoneNamespace(bytes: [UInt8](repeating: 0, count: 9))
        }
        #expect(throws: BeaconError.invalidIdentifierLength(expected: 6, actual: 7)) {
            try EddystoneInstance(hex: "01020304050607")
        }
        #expect(throws: BeaconError.invalidHex("0g")) { try EddystoneInstance(hex: "0g") }
        #expect(throws: BeaconError.invalidHex("abc")) { try EddystoneInstance(hex: "abc") }
    }
}
