@testable import BlueZ
import Beacons
import BluetoothLE
import DBus
import NearbyCore
import Testing

/// How nearbyd reads bluetoothd's objects: adapters, the adapter it picks, and
/// the tokens, strengths and kinds of devices.
@Suite struct BlueZObjectsTests {
    static let token = Token(bytes: [1, 2, 3, 4, 5, 6, 7, 8])!

    static func serviceData(_ uuid: String = TokenFrame.serviceUUID, _ bytes: [UInt8] = token.bytes,
                            extraVariant: Bool = false) -> DBusValue {
        let value: DBusValue = extraVariant ? .variant(.variant(.bytes(bytes))) : .variant(.bytes(bytes))
        return .dictionary(key: "s", value: "v", [DictEntry(.string(uuid), value)])
    }

    static func adapter(powered: Bool, monitors: Bool = false) -> ManagedInterfaces {
        var interfaces: ManagedInterfaces = [
            "org.bluez.Adapter1": ["Powered": .bool(powered), "Address": .string("00:AA:01:00:00:00")],
            "org.bluez.LEAdvertisingManager1": ["SupportedInstances": .byte(4)],
        ]
        if monitors { interfaces["org.bluez.AdvertisementMonitorManager1"] = ["SupportedMonitorTypes": .strings(["or_patterns"])] }
        return interfaces
    }

    @Test func theFirstPoweredAdapterIsChosenUnlessOneIsConfigured() throws {
        let objects = BlueZObjects([
            "/org/bluez/hci1": Self.adapter(powered: true),
            "/org/bluez/hci0": Self.adapter(powered: false, monitors: true),
            "/org/bluez": ["org.bluez.AgentManager1": [:]],
        ])
        #expect(objects.adapters.map(\.name) == ["hci0", "hci1"])
        #expect(objects.adapters.map(\.canMonitorPatterns) == [true, false])
        #expect(AdapterInfo.choose(from: objects.adapters, configured: nil)?.name == "hci1")
        #expect(AdapterInfo.choose(from: objects.adapters, configured: "hci0")?.name == "hci0")
        #expect(AdapterInfo.choose(from: objects.adapters, configured: "hci7") == nil)
        // With none powered, the first is watched until one is.
        let dark = BlueZObjects(["/org/bluez/hci0": Self.adapter(powered: false), "/org/bluez/hci1": Self.adapter(powered: false)])
        #expect(AdapterInfo.choose(from: dark.adapters, configured: nil)?.name == "hci0")
    }

    @Test func aDeviceCarriesATokenOnlyUnderNearbydsUUIDWithEightBytes() {
        func token(_ serviceData: DBusValue?) -> Token? {
            DeviceInfo(path: "/org/bluez/hci0/dev_1", properties: serviceData.map { ["ServiceData": $0] } ?? [:]).token
        }
        #expect(token(Self.serviceData()) == Self.token)
        #expect(token(Self.serviceData(TokenFrame.serviceUUID.uppercased())) == Self.token)
        #expect(token(Self.serviceData(extraVariant: true)) == Self.token)
        #expect(token(Self.serviceData("0000feaa-0000-1000-8000-00805f9b34fb")) == nil)
        #expect(token(Self.serviceData(TokenFrame.serviceUUID, [1, 2, 3])) == nil)
        #expect(token(Self.serviceData(TokenFrame.serviceUUID, Array(repeating: 9, count: 9))) == nil)
        #expect(token(.string("not a dictionary")) == nil)
        #expect(token(nil) == nil)
    }

    @Test func beaconsAreReadFromEddystoneServiceDataAndAppleManufacturerData() throws {
        let uid = try BeaconFrame(kind: .eddystoneUID, text: "8b0ca750095477cb3e77/331122334455", powerAtOneMetre: -59)
        guard case .eddystoneUID(let frame) = uid else { throw BeaconError.noBeaconFound }
        let eddystone = DeviceInfo(path: "/d", properties: ["ServiceData": Self.serviceData(DeviceInfo.eddystoneUUID, frame.serviceData)])
        #expect(eddystone.beacon == uid && eddystone.token == nil)

        let iBeacon = try BeaconFrame(kind: .iBeacon, text: "e2c56db5-dffb-48d2-b060-d0f5a71096e0/1/2", powerAtOneMetre: -65)
        // BlueZ keys manufacturer data by company id and leaves it out of the bytes.
        let apple = Array(iBeacon.advertisingData.suffix(23))
        func manufacturerData(_ company: UInt16, _ bytes: [UInt8]) -> DBusValue {
            .dictionary(key: "q", value: "v", [DictEntry(.uint16(company), .variant(.bytes(bytes)))])
        }
        #expect(DeviceInfo(path: "/d", properties: ["ManufacturerData": manufacturerData(0x004C, apple)]).beacon == iBeacon)
        // Another company's bytes, a malformed Eddystone frame, nearbyd's own token: no beacon.
        #expect(DeviceInfo(path: "/d", properties: ["ManufacturerData": manufacturerData(0x0059, apple)]).beacon == nil)
        #expect(DeviceInfo(path: "/d", properties: ["ServiceData": Self.serviceData(DeviceInfo.eddystoneUUID, [0x00, 0xEE])]).beacon == nil)
        #expect(DeviceInfo(path: "/d", properties: ["ServiceData": Self.serviceData()]).beacon == nil)
    }

    @Test func unknownStrengthsAreNilAndTransmitPowerSetsTheReference() {
        func device(_ properties: [String: DBusValue]) -> DeviceInfo { DeviceInfo(path: "/org/bluez/hci0/dev_1", properties: properties) }
        #expect(device(["RSSI": .int16(-70)]).rssi == -70)
        // Virtual controllers report 127; bluetoothd sets 0 when discovery ends.
        #expect(device(["RSSI": .int16(127)]).rssi == nil)
        #expect(device(["RSSI": .int16(0)]).rssi == nil)
        #expect(device([:]).referencePower(default: -59) == -59)
        #expect(device(["TxPower": .int16(4)]).referencePower(default: -59) == -37)
        #expect(device(["TxPower": .int16(127)]).referencePower(default: -59) == -59)
    }

    @Test func pairedTrustedOrConnectedDevicesAreNotTemporary() {
        for name in ["Paired", "Bonded", "Trusted", "Connected"] {
            #expect(!DeviceInfo(path: "/d", properties: [name: .bool(true)]).isTemporary)
        }
        #expect(DeviceInfo(path: "/d", properties: ["Paired": .bool(false)]).isTemporary)
    }

    @Test func signalsKeepTheObjectsCurrent() {
        var objects = BlueZObjects()
        let path: ObjectPath = "/org/bluez/hci0/dev_C0_00_00_00_00_01"
        objects.add("/org/bluez/hci0", Self.adapter(powered: true))
        objects.add(path, ["org.bluez.Device1": ["Adapter": .objectPath("/org/bluez/hci0"), "RSSI": .int16(-80)]])
        #expect(objects.device(at: path)?.token == nil)

        objects.change(path, "org.bluez.Device1", changed: ["ServiceData": Self.serviceData(), "RSSI": .int16(-60)], invalidated: [])
        #expect(objects.device(at: path)?.token == Self.token)
        #expect(objects.device(at: path)?.rssi == -60)
        objects.change(path, "org.bluez.Device1", changed: [:], invalidated: ["RSSI"])
        #expect(objects.device(at: path)?.rssi == nil)
        // A change for an interface the object lacks is ignored, not invented.
        objects.change(path, "org.bluez.Battery1", changed: ["Percentage": .byte(5)], invalidated: [])
        #expect(objects.objects[path]?["org.bluez.Battery1"] == nil)

        objects.change("/org/bluez/hci0", "org.bluez.Adapter1", changed: ["Powered": .bool(false)], invalidated: [])
        #expect(objects.adapters.first?.powered == false)
        objects.remove(path, ["org.bluez.Device1"])
        #expect(objects.device(at: path) == nil && objects.objects[path] == nil)
    }
}
