import Testing
@testable import Beacons

@Suite("Eddystone-TLM")
struct EddystoneTLMTests {
    @Test func parsesPlainFrame() throws {
        let tlm = try EddystoneTLM(serviceData: Vectors.tlmFrame)
        #expect(tlm.batteryVoltage == 3000)
        #expect(tlm.batteryMillivolts == 3000)
        #expect(tlm.temperatureFixedPoint == 0x1780)
        #expect(tlm.temperatureCelsius == 23.5)
        #expect(tlm.advertisingPDUCount == 256)
        #expect(tlm.uptimeDeciseconds == 3600)
        #expect(tlm.uptimeSeconds == 360)
        #expect(tlm.serviceData == Vectors.tlmFrame)
    }

    @Test func notSupportedSentinels() throws {
        let tlm = try EddystoneTLM(serviceData: Vectors.tlmFrameUnsupportedSensors)
        #expect(tlm.batteryMillivolts == nil)
        #expect(tlm.temperatureCelsius == nil)
        #expect(tlm.temperatureFixedPoint == EddystoneTLM.temperatureNotSupported)
        #expect(tlm.advertisingPDUCount == UInt32.max)
        #expect(tlm.serviceData == Vectors.tlmFrameUnsupportedSensors)
    }

    @Test func negativeTemperature() throws {
        // 0xFF80 = -0.5 °C; 0xEC00 = -20 °C.
        var frame = Vectors.tlmFrame
        frame[4] = 0xFF; frame[5] = 0x80
        #expect(try EddystoneTLM(serviceData: frame).temperatureCelsius == -0.5)
        frame[4] = 0xEC; frame[5] = 0x00
        #expect(try EddystoneTLM(serviceData: frame).temperatureCelsius == -20)
    }

    @Test func encryptedTLMIsDistinctlyUnsupported() {
        #expect(throws: BeaconError.encryptedTLMUnsupported) {
            try EddystoneTLM(serviceData: Vectors.encryptedTLMFrame)
        }
        #expect(throws: BeaconError.encryptedTLMUnsupported) {
            try BeaconFrame(advertisingData: Vectors.eddystoneAdvertisement(Vectors.encryptedTLMFrame))
        }
    }

    @Test(arguments: [0x02, 0x10, 0xFF] as [UInt8])
    func rejectsUnknownVersions(version: UInt8) {
        var frame = Vectors.tlmFrame
        frame[1] = version
        #expect(throws: BeaconError.unknownTLMVersion(version)) { try EddystoneTLM(serviceData: frame) }
    }

    @Test(arguments: [1, 2, 13, 15, 18])
    func rejectsBadLengths(length: Int) {
        let frame = Array((Vectors.tlmFrame + [0, 0, 0, 0]).prefix(length))
        #expect(throws: BeaconError.invalidLength(.eddystoneTLM, actual: length)) {
            try EddystoneTLM(serviceData: frame)
        }
    }

    @Test func advertisementServiceDataLengthIs0x11() throws {
        let tlm = try EddystoneTLM(serviceData: Vectors.tlmFrame)
        let payload = tlm.advertisingData
        #expect(payload[7] == 0x11)  // the TLM spec's required Service Data length
        #expect(payload == Vectors.eddystoneAdvertisement(Vectors.tlmFrame))
        #expect(try BeaconFrame(advertisingData: payload) == .eddystoneTLM(tlm))
    }
}
