import Foundation
import Testing
@testable import Beacons

@Suite("iBeacon")
struct IBeaconTests {
    let sample = IBeacon(proximityUUID: Vectors.iBeaconUUID, major: 1, minor: 2, measuredPower: -59)

    @Test func parsesManufacturerData() throws {
        let beacon = try IBeacon(manufacturerData: Vectors.iBeaconManufacturerData)
        #expect(beacon == sample)
        #expect(beacon.proximityUUID.uuidString == "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")
        #expect(beacon.major == 1)
        #expect(beacon.minor == 2)
        #expect(beacon.measuredPower == -59)
    }

    @Test func buildsManufacturerDataAndPayload() throws {
        #expect(sample.manufacturerData == Vectors.iBeaconManufacturerData)
        #expect(sample.manufacturerData.count == 25)
        #expect(sample.advertisingData == Vectors.iBeaconAdvertisement)
        #expect(sample.advertisingData.count == 30)
        #expect(try IBeacon(advertisingData: Vectors.iBeaconAdvertisement) == sample)
        #expect(try BeaconFrame(advertisingData: Vectors.iBeaconAdvertisement) == .iBeacon(sample))
    }

    @Test func bigEndianMajorMinor() throws {
        let beacon = IBeacon(proximityUUID: Vectors.iBeaconUUID, major: 0xABCD, minor: 0x1234, measuredPower: 0)
        #expect(Array(beacon.manufacturerData[20...24]) == [0xAB, 0xCD, 0x12, 0x34, 0x00])
    }

    @Test(arguments: [
        ([0x59, 0x00] as [UInt8], BeaconError.wrongCompanyID(0x0059)),  // Nordic's id
        ([0x00, 0x4C], BeaconError.wrongCompanyID(0x4C00)),             // id sent big-endian
    ])
    func rejectsWrongCompanyID(companyBytes: [UInt8], error: BeaconError) {
        var data = Vectors.iBeaconManufacturerData
        data[0] = companyBytes[0]; data[1] = companyBytes[1]
        #expect(throws: error) { try IBeacon(manufacturerData: data) }
    }

    @Test func rejectsOtherAppleTypes() {
        var data = Vectors.iBeaconManufacturerData
        data[2] = 0x10  // an Apple "Nearby" advertisement, not an iBeacon
        #expect(throws: BeaconError.wrongIBeaconType(0x10)) { try IBeacon(manufacturerData: data) }
    }

    @Test func rejectsWrongLengthByte() {
        var data = Vectors.iBeaconManufacturerData
        data[3] = 0x16
        #expect(throws: BeaconError.wrongIBeaconDataLength(0x16)) { try IBeacon(manufacturerData: data) }
    }

    @Test(arguments: [0, 1, 2, 3, 4, 24, 26, 31])
    func rejectsWrongTotalLength(length: Int) {
        let data = Array((Vectors.iBeaconManufacturerData + [0, 0, 0, 0, 0, 0]).prefix(length))
        #expect(throws: BeaconError.invalidLength(.iBeacon, actual: length)) {
            try IBeacon(manufacturerData: data)
        }
    }

    @Test func payloadErrorsNameTheManufacturerDataProblem() {
        var payload = Vectors.iBeaconAdvertisement
        payload[5] = 0x59  // company id low byte
        #expect(throws: BeaconError.wrongCompanyID(0x0059)) { try IBeacon(advertisingData: payload) }
        // Not a beacon at all as far as the generic entry point is concerned.
        #expect(throws: BeaconError.noBeaconFound) { try BeaconFrame(advertisingData: payload) }

        var badLength = Vectors.iBeaconAdvertisement
        badLength[8] = 0x14
        #expect(throws: BeaconError.wrongIBeaconDataLength(0x14)) { try BeaconFrame(advertisingData: badLength) }

        #expect(throws: BeaconError.noBeaconFound) { try IBeacon(advertisingData: [0x02, 0x01, 0x06]) }
    }

    @Test func advertisedID() {
        let id = sample.advertisedID
        #expect(id.type == .iBeacon)
        #expect(id.type.rawValue == "IBEACON")
        #expect(id.bytes.count == 20)
        #expect(id.hex == "e2c56db5dffb48d2b060d0f5a71096e000010002")
        #expect(id.base64 == "4sVttd/7SNKwYND1pxCW4AABAAI=")
        #expect(id.beaconName == "beacons/1!e2c56db5dffb48d2b060d0f5a71096e000010002")
        #expect(id.description == "IBEACON:e2c56db5dffb48d2b060d0f5a71096e000010002")
    }
}
