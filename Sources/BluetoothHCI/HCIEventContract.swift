import BluetoothLE
import Mediums
import NearbyCore

/// What nearbyd's raw-HCI backend promises about any packet a controller (or
/// anything else on the HCI socket) may send: checked on every input by the
/// hci-fuzz harness (Sources/HCIFuzz), which reaches it through this SPI.
///
/// An event is read from its declared parameters only, never past the bytes
/// there; an advertising report event yields at most as many reports as it
/// announces, each with data within its kind's limit and an RSSI within the
/// spec's range (or none); and a report becomes a token sighting at a finite
/// distance, a beacon sighting, or nothing, as ``HCIController`` makes them.
@_spi(Testing) public enum HCIEventContract {
    /// The transmit power the sightings are made with (`[ble] tx-power`).
    static let txPower = -59

    /// Reads `packet` as the backend reads what its socket delivers; traps,
    /// naming the promise, when one is broken.
    public static func check(packet: [UInt8]) {
        let event = HCIEvent(packet: packet)
        if packet.count >= 3 {
            // The bytes past the declared length are no part of the event.
            let declared = Array(packet.prefix(3 + Int(packet[2])))
            expect(HCIEvent(packet: declared) == event, "bytes past the declared length were read", packet)
        }
        guard case .advertisingReports(let reports)? = event else {
            if case .commandComplete(_, let returned)? = event {
                expect(returned.count <= 252, "\(returned.count) bytes of return parameters", packet)
            }
            return
        }
        let announced = packet.count > 4 ? Int(packet[4]) : 0
        expect(reports.count <= announced, "\(reports.count) reports where \(announced) were announced", packet)
        let extended = packet.count > 3 && packet[3] == HCIEvent.extendedAdvertisingReportSubevent
        for report in reports {
            let limit = extended ? AdvertisingReport.maximumExtendedLength : AdvertisingData.maximumLength
            expect(report.data.count <= limit, "a report of \(report.data.count) bytes of data", packet)
            if let rssi = report.rssi { expect((-127...20).contains(rssi), "a report at \(rssi) dBm", packet) }
            if let sighting = HCIMedium.sighting(from: report, txPower: txPower, seenAtMilliseconds: 0) {
                expect(sighting.distanceMeters.isFinite && sighting.distanceMeters >= 0,
                       "a sighting at \(sighting.distanceMeters) m", packet)
            } else {
                _ = HCIMedium.beaconSighting(from: report)
            }
        }
    }

    private static func expect(_ condition: Bool, _ promise: @autoclosure () -> String, _ packet: [UInt8]) {
        if !condition { fatalError("HCI: \(promise()), for the packet \(packet.prefix(300))") }
    }
}
