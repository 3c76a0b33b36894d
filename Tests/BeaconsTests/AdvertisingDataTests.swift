import Testing
@testable import Beacons

@Suite("Advertising data")
struct AdvertisingDataTests {
    @Test func splitsStructures() throws {
        let structures = try ADStructure.parse(Vectors.iBeaconAdvertisement)
        #expect(structures.map(\.type) == [0x01, 0xFF])
        #expect(structures.map(\.offset) == [0, 3])
        #expect(Array(structures[0].data) == [0x06])
        #expect(Array(structures[1].data) == Vectors.iBeaconManufacturerData)
    }

    @Test func emptyPayloadHasNoBeacon() throws {
        #expect(try ADStructure.parse([]).isEmpty)
        #expect(throws: BeaconError.noBeaconFound) { try BeaconFrame(advertisingData: []) }
        #expect(BeaconFrame.parse(advertisingData: []) == nil)
    }

    @Test func truncatedStructureIsRejected() {
        // The iBeacon advertisement cut short inside its manufacturer data.
        let cut = Array(Vectors.iBeaconAdvertisement.dropLast())
        #expect(throws: BeaconError.adStructureOverrunsPayload(offset: 3, declaredLength: 26, available: 25)) {
            try BeaconFrame(advertisingData: cut)
        }
        #expect(throws: BeaconError.adStructureOverrunsPayload(offset: 0, declaredLength: 2, available: 0)) {
            try ADStructure.parse([0x02])
        }
    }

    @Test func overlongLengthIsRejected() {
        #expect(throws: BeaconError.adStructureOverrunsPayload(offset: 3, declaredLength: 255, available: 2)) {
            try BeaconFrame(advertisingData: [0x02, 0x01, 0x06, 0xFF, 0xFF, 0x4C])
        }
    }

    @Test func zeroPaddingAfterTerminatorIsAccepted() throws {
        let padded = Vectors.iBeaconAdvertisement + [0x00]
        #expect(try BeaconFrame(advertisingData: padded).kind == .iBeacon)
        let uidPadded = Vectors.uidAdvertisement + [UInt8](repeating: 0, count: 31)
        #expect(try BeaconFrame(advertisingData: uidPadded).kind == .eddystoneUID)
    }

    @Test func dataAfterZeroLengthIsRejected() {
        #expect(throws: BeaconError.dataAfterTerminator(offset: 0)) {
            try BeaconFrame(advertisingData: [0x00] + Vectors.iBeaconAdvertisement)
        }
        #expect(throws: BeaconError.dataAfterTerminator(offset: 3)) {
            try ADStructure.parse([0x02, 0x01, 0x06, 0x00, 0x00, 0x01])
        }
    }

    @Test func eddystoneRequiresUUIDInAList() {
        let noList: [UInt8] = [0x02, 0x01, 0x06, 0x17, 0x16, 0xAA, 0xFE] + Vectors.uidFrame
        #expect(throws: BeaconError.eddystoneUUIDNotListed) { try BeaconFrame(advertisingData: noList) }
        // A list naming only other services does not count.
        let otherList: [UInt8] = [0x03, 0x03, 0x0F, 0x18, 0x17, 0x16, 0xAA, 0xFE] + Vectors.uidFrame
        #expect(throws: BeaconError.eddystoneUUIDNotListed) { try BeaconFrame(advertisingData: otherList) }
    }

    @Test(arguments: [0x02, 0x03, 0x14] as [UInt8])
    func anyUUIDListTypeNamesEddystone(listType: UInt8) throws {
        // Battery service 0x180F listed before 0xFEAA; the list comes after the service data.
        let payload: [UInt8] = [0x17, 0x16, 0xAA, 0xFE] + Vectors.uidFrame + [0x05, listType, 0x0F, 0x18, 0xAA, 0xFE]
        #expect(try BeaconFrame(advertisingData: payload).kind == .eddystoneUID)
    }

    @Test func oddUUIDListIsRejected() {
        let payload: [UInt8] = [0x04, 0x03, 0xAA, 0xFE, 0x0F] + [0x17, 0x16, 0xAA, 0xFE] + Vectors.uidFrame
        #expect(throws: BeaconError.malformedServiceUUIDList(offset: 0, length: 3)) {
            try BeaconFrame(advertisingData: payload)
        }
    }

    @Test func shortServiceDataIsRejected() {
        #expect(throws: BeaconError.serviceDataTooShort(offset: 4, length: 1)) {
            try BeaconFrame(advertisingData: [0x03, 0x03, 0xAA, 0xFE, 0x02, 0x16, 0xAA])
        }
    }

    @Test func otherServiceDataAndManufacturersAreSkipped() throws {
        // Service data for 0x180F (battery), Nordic manufacturer data, then an Apple
        // non-iBeacon advertisement: well formed, but no beacon.
        let payload: [UInt8] = [0x04, 0x16, 0x0F, 0x18, 0x64, 0x04, 0xFF, 0x59, 0x00, 0x01,
                                0x05, 0xFF, 0x4C, 0x00, 0x10, 0x05]
        #expect(throws: BeaconError.noBeaconFound) { try BeaconFrame(advertisingData: payload) }
        // The same junk in front of an iBeacon does not hide it.
        #expect(try BeaconFrame(advertisingData: payload + Vectors.iBeaconAdvertisement).kind == .iBeacon)
    }

    @Test func firstBeaconStructureWins() throws {
        let both = Vectors.uidAdvertisement + Vectors.iBeaconAdvertisement
        #expect(try BeaconFrame(advertisingData: both).kind == .eddystoneUID)
        let reversed = Vectors.iBeaconAdvertisement + Vectors.uidAdvertisement
        #expect(try BeaconFrame(advertisingData: reversed).kind == .iBeacon)
    }

    @Test func malformedEddystoneFrameIsAnErrorNotSkipped() {
        var frame = Vectors.uidFrame
        frame.removeLast(3)  // 17 bytes
        #expect(throws: BeaconError.invalidLength(.eddystoneUID, actual: 17)) {
            try BeaconFrame(advertisingData: Vectors.eddystoneAdvertisement(frame))
        }
    }

    @Test func errorsDescribeThemselves() {
        #expect(BeaconError.invalidLength(.eddystoneUID, actual: 19).description
            == "Eddystone-UID frame must be 18 or 20 bytes, got 19")
        #expect(BeaconError.reservedURLByte(0x0E, offset: 3).description
            == "reserved byte 0x0E at offset 3 of encoded URL")
        #expect(BeaconError.wrongCompanyID(0x59).description == "company id 0x0059 is not Apple's 0x004C")
    }
}
