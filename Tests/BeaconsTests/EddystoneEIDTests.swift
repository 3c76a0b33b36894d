import Testing
@testable import Beacons

@Suite("Eddystone-EID")
struct EddystoneEIDTests {
    @Test func parsesFrame() throws {
        let eid = try EddystoneEID(serviceData: Vectors.eidFrame)
        #expect(eid.txPower == -10)
        #expect(eid.ephemeralID.bytes == Vectors.eidBytes)
        #expect(eid.serviceData == Vectors.eidFrame)
    }

    @Test(arguments: [1, 2, 9, 11, 20])
    func rejectsBadLengths(length: Int) {
        let frame = Array((Vectors.eidFrame + [UInt8](repeating: 0, count: 10)).prefix(length))
        #expect(throws: BeaconError.invalidLength(.eddystoneEID, actual: length)) {
            try EddystoneEID(serviceData: frame)
        }
    }

    @Test func advertisedIDAndRoundTrip() throws {
        let eid = EddystoneEID(txPower: -10, ephemeralID: try EddystoneEphemeralID(hex: "0123456789abcdef"))
        let frame = try BeaconFrame(advertisingData: eid.advertisingData)
        #expect(frame == .eddystoneEID(eid))
        #expect(frame.advertisedID?.type == .eddystoneEID)
        #expect(frame.advertisedID?.hex == "0123456789abcdef")
        #expect(frame.advertisedID?.beaconName == nil)
    }
}

@Suite("Eddystone frame dispatch")
struct EddystoneDispatchTests {
    @Test func dispatchesOnFrameType() throws {
        #expect(try BeaconFrame(eddystoneServiceData: Vectors.uidFrame).kind == .eddystoneUID)
        #expect(try BeaconFrame(eddystoneServiceData: Vectors.urlFrame).kind == .eddystoneURL)
        #expect(try BeaconFrame(eddystoneServiceData: Vectors.tlmFrame).kind == .eddystoneTLM)
        #expect(try BeaconFrame(eddystoneServiceData: Vectors.eidFrame).kind == .eddystoneEID)
    }

    // 0x40/0x50: unassigned high nibbles; 0x01/0x11/0x2F: reserved low nibble set.
    @Test(arguments: [0x01, 0x11, 0x2F, 0x40, 0x50, 0xF0, 0xFF] as [UInt8])
    func rejectsUnknownFrameTypes(type: UInt8) {
        #expect(throws: BeaconError.unknownEddystoneFrameType(type)) {
            try BeaconFrame(eddystoneServiceData: [type, 0x00, 0x00, 0x00])
        }
        #expect(throws: BeaconError.unknownEddystoneFrameType(type)) {
            try BeaconFrame(advertisingData: Vectors.eddystoneAdvertisement([type]))
        }
    }

    @Test func rejectsEmptyServiceData() {
        #expect(throws: BeaconError.emptyEddystoneFrame) { try BeaconFrame(eddystoneServiceData: []) }
        // Service data holding only the UUID.
        #expect(throws: BeaconError.emptyEddystoneFrame) {
            try BeaconFrame(advertisingData: Vectors.eddystoneAdvertisement([]))
        }
    }
}
