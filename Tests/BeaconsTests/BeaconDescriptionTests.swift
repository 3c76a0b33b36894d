import Foundation
import Testing
@testable import Beacons

/// `BeaconFrame(kind:text:powerAtOneMetre:)`: what `nearby-air beacon add` takes.
struct BeaconDescriptionTests {
    @Test func eachKindIsBuiltFromItsText() throws {
        let uid = try BeaconFrame(kind: .eddystoneUID, text: "8b0ca750095477cb3e77/331122334455", powerAtOneMetre: -59)
        #expect(try BeaconFrame(kind: .eddystoneUID, text: "8b0ca750095477cb3e77331122334455", powerAtOneMetre: -59) == uid)
        #expect(uid.advertisedID?.hex == "8b0ca750095477cb3e77331122334455")
        // Eddystone declares its power at 0 m: 41 dB above the 1 m figure.
        guard case .eddystoneUID(let frame) = uid else { Issue.record("not a UID: \(uid)"); return }
        #expect(frame.txPower == -18)
        #expect(uid.powerAtOneMetre == -59)

        let eid = try BeaconFrame(kind: .eddystoneEID, text: "0102030405060708", powerAtOneMetre: -70)
        #expect(eid.advertisedID == (try AdvertisedID(type: .eddystoneEID, bytes: [1, 2, 3, 4, 5, 6, 7, 8])))

        let url = try BeaconFrame(kind: .eddystoneURL, text: "https://example.com/", powerAtOneMetre: -59)
        #expect(BeaconFrame.parse(advertisingData: url.advertisingData) == url)

        let tlm = try BeaconFrame(kind: .eddystoneTLM, text: "3000:21.5:1000:3600", powerAtOneMetre: -59)
        #expect(tlm == .eddystoneTLM(EddystoneTLM(batteryVoltage: 3000, temperatureFixedPoint: 5504,
                                                  advertisingPDUCount: 1000, uptimeDeciseconds: 36_000)))
        let bare = try BeaconFrame(kind: .eddystoneTLM, text: "::7:1", powerAtOneMetre: -59)
        #expect(bare == .eddystoneTLM(EddystoneTLM(batteryVoltage: 0, temperatureFixedPoint: EddystoneTLM.temperatureNotSupported,
                                                   advertisingPDUCount: 7, uptimeDeciseconds: 10)))
        #expect(tlm.powerAtOneMetre == nil)

        let iBeacon = try BeaconFrame(kind: .iBeacon, text: "e2c56db5dffb48d2b060d0f5a71096e0/1/2", powerAtOneMetre: -65)
        #expect(iBeacon == .iBeacon(IBeacon(proximityUUID: UUID(uuidString: "E2C56DB5-DFFB-48D2-B060-D0F5A71096E0")!,
                                            major: 1, minor: 2, measuredPower: -65)))
        #expect(iBeacon.powerAtOneMetre == -65)
    }

    @Test(arguments: [
        (BeaconKind.eddystoneUID, "8b0ca750095477cb3e77/3311223344"),
        (.eddystoneUID, "8b0ca750/095477cb3e77/331122334455"),
        (.eddystoneTLM, "3000:21.5:1000"),
        (.eddystoneTLM, "3000:300:1000:1"),
        (.eddystoneTLM, "70000:20:1:1"),
        (.iBeacon, "e2c56db5dffb48d2b060d0f5a71096e0/1"),
        (.iBeacon, "e2c56db5dffb48d2b060d0f5a71096e0/1/70000"),
        (.iBeacon, "not-a-uuid/1/2"),
    ])
    func malformedTextIsANamedError(kind: BeaconKind, text: String) {
        #expect(throws: BeaconError.invalidDescription(kind, text)) {
            try BeaconFrame(kind: kind, text: text, powerAtOneMetre: -59)
        }
    }

    @Test func fieldErrorsKeepTheirOwnNames() {
        #expect(throws: BeaconError.invalidHex("xyz")) { try BeaconFrame(kind: .eddystoneEID, text: "xyz", powerAtOneMetre: -59) }
        #expect(throws: BeaconError.unsupportedURLScheme("ftp://x")) {
            try BeaconFrame(kind: .eddystoneURL, text: "ftp://x", powerAtOneMetre: -59)
        }
        #expect("\(BeaconError.invalidDescription(.iBeacon, "x"))" == #""x" does not describe an iBeacon beacon: UUID/MAJOR/MINOR"#)
    }
}
