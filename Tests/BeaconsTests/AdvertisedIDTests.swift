import Testing
@testable import Beacons

@Suite("Advertised ids")
struct AdvertisedIDTests {
    @Test func eddystoneUIDIsNamespacePlusInstance() throws {
        let frame = try BeaconFrame(advertisingData: Vectors.uidAdvertisement)
        let id = try #require(frame.advertisedID)
        #expect(id.type.rawValue == "EDDYSTONE")
        #expect(id.bytes == Vectors.namespaceBytes + Vectors.instanceBytes)
        #expect(id.hex == "8b0ca750095477cb3e77010203040506")
        #expect(id.base64 == "iwynUAlUd8s+dwECAwQFBg==")
        #expect(id.beaconName == "beacons/3!8b0ca750095477cb3e77010203040506")
    }

    @Test func eidTypeName() throws {
        let id = try EddystoneEID(serviceData: Vectors.eidFrame).advertisedID
        #expect(id.type.rawValue == "EDDYSTONE_EID")
        #expect(id.bytes == Vectors.eidBytes)
    }

    @Test func urlAndTLMHaveNoID() throws {
        #expect(try BeaconFrame(eddystoneServiceData: Vectors.urlFrame).advertisedID == nil)
        #expect(try BeaconFrame(eddystoneServiceData: Vectors.tlmFrame).advertisedID == nil)
    }

    @Test func publicInitChecksLength() throws {
        #expect(throws: BeaconError.invalidIdentifierLength(expected: 20, actual: 16)) {
            try AdvertisedID(type: .iBeacon, bytes: [UInt8](repeating: 0, count: 16))
        }
        let id = try AdvertisedID(type: .eddystoneEID, bytes: Vectors.eidBytes)
        #expect(id == (try EddystoneEID(serviceData: Vectors.eidFrame).advertisedID))
    }
}
