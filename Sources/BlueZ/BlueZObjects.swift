import Beacons
import BluetoothLE
import DBus
import NearbyCore

/// The D-Bus names of BlueZ that nearbyd uses.
enum BlueZ {
    static let service = "org.bluez"
    static let adapter = "org.bluez.Adapter1"
    static let device = "org.bluez.Device1"
    static let advertisingManager = "org.bluez.LEAdvertisingManager1"
    static let monitorManager = "org.bluez.AdvertisementMonitorManager1"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"
}

/// Interfaces and their properties, as `GetManagedObjects` returns them.
typealias ManagedInterfaces = [String: [String: DBusValue]]

/// What bluetoothd has told nearbyd about its objects: the reply of
/// `GetManagedObjects`, kept current with `InterfacesAdded`,
/// `InterfacesRemoved` and `PropertiesChanged`. Values are stored without
/// their variant wrapper.
struct BlueZObjects: Sendable {
    private(set) var objects: [ObjectPath: ManagedInterfaces] = [:]

    init(_ objects: [ObjectPath: ManagedInterfaces] = [:]) {
        self.objects = objects.mapValues { $0.mapValues { $0.mapValues(Self.unwrapped) } }
    }

    mutating func add(_ path: ObjectPath, _ interfaces: ManagedInterfaces) {
        for (name, properties) in interfaces {
            objects[path, default: [:]][name] = properties.mapValues(Self.unwrapped)
        }
    }

    mutating func remove(_ path: ObjectPath, _ interfaces: [String]) {
        for name in interfaces { objects[path]?.removeValue(forKey: name) }
        if objects[path]?.isEmpty == true { objects.removeValue(forKey: path) }
    }

    /// Applies a PropertiesChanged; ignored for an interface not known at `path`.
    mutating func change(_ path: ObjectPath, _ interface: String, changed: [String: DBusValue], invalidated: [String]) {
        guard objects[path]?[interface] != nil else { return }
        for (name, value) in changed { objects[path]?[interface]?[name] = Self.unwrapped(value) }
        for name in invalidated { objects[path]?[interface]?.removeValue(forKey: name) }
    }

    /// Every adapter, in path order (hci0 before hci1).
    var adapters: [AdapterInfo] {
        objects.keys.sorted().compactMap(adapter(at:))
    }

    func adapter(at path: ObjectPath) -> AdapterInfo? {
        guard let interfaces = objects[path], let properties = interfaces[BlueZ.adapter] else { return nil }
        return AdapterInfo(
            path: path,
            name: Self.name(of: path),
            powered: properties["Powered"]?.bool ?? false,
            discovering: properties["Discovering"]?.bool ?? false,
            canAdvertise: interfaces[BlueZ.advertisingManager] != nil,
            monitorTypes: interfaces[BlueZ.monitorManager]?["SupportedMonitorTypes"]?.strings ?? [])
    }

    func device(at path: ObjectPath) -> DeviceInfo? {
        guard let properties = objects[path]?[BlueZ.device] else { return nil }
        return DeviceInfo(path: path, properties: properties)
    }

    /// The last element of a path: `hci0` for an adapter.
    static func name(of path: ObjectPath) -> String {
        String(path.rawValue.split(separator: "/").last ?? "")
    }

    /// The value inside any number of variant layers (some BlueZ stand-ins add one).
    static func unwrapped(_ value: DBusValue) -> DBusValue {
        var value = value
        while case .variant(let inner) = value { value = inner }
        return value
    }
}

/// One `org.bluez.Adapter1` and what it offers.
struct AdapterInfo: Equatable, Sendable {
    let path: ObjectPath
    /// The last path element, such as `hci0`: what the configuration names.
    let name: String
    let powered: Bool
    let discovering: Bool
    /// Whether it has `LEAdvertisingManager1`.
    let canAdvertise: Bool
    /// `AdvertisementMonitorManager1.SupportedMonitorTypes`; empty without the
    /// interface (bluetoothd before 5.66, or not running with Experimental).
    let monitorTypes: [String]

    var canMonitorPatterns: Bool { monitorTypes.contains("or_patterns") }

    /// The adapter nearbyd uses: the configured one if it exists, else (nothing
    /// configured) the first powered one, or the first one while none is powered.
    static func choose(from adapters: [AdapterInfo], configured: String?) -> AdapterInfo? {
        if let configured { return adapters.first { $0.name == configured } }
        return adapters.first(where: \.powered) ?? adapters.first
    }
}

/// What nearbyd reads from one `org.bluez.Device1`.
struct DeviceInfo: Equatable, Sendable {
    let path: ObjectPath
    let adapter: ObjectPath?
    /// nearbyd's token from `ServiceData`, if the device carries one.
    let token: Token?
    /// The beacon frame the device advertises, if any: Eddystone service data
    /// or Apple iBeacon manufacturer data.
    let beacon: BeaconFrame?
    /// Received signal strength, dBm; nil when unknown (absent, 127, or the 0
    /// that bluetoothd sets when discovery ends).
    let rssi: Int?
    /// The advertised transmit power level, dBm; nil when not advertised.
    let txPower: Int?
    /// Neither paired, bonded, trusted nor connected: bluetoothd's own
    /// temporary devices, which nearbyd may remove once they are stale.
    let isTemporary: Bool

    init(path: ObjectPath, properties: [String: DBusValue]) {
        self.path = path
        adapter = properties["Adapter"]?.objectPath
        token = Self.token(in: properties["ServiceData"])
        beacon = token == nil ? Self.beacon(serviceData: properties["ServiceData"],
                                            manufacturerData: properties["ManufacturerData"]) : nil
        let rssi = properties["RSSI"]?.int16.map(Int.init)
        self.rssi = rssi.flatMap { $0 == 127 || $0 == 0 ? nil : $0 }
        let txPower = properties["TxPower"]?.int16.map(Int.init)
        self.txPower = txPower.flatMap { $0 == 127 ? nil : $0 }
        isTemporary = !["Paired", "Bonded", "Trusted", "Connected"].contains { properties[$0]?.bool == true }
    }

    /// `ServiceData` is `a{sv}`: UUID (lower case from bluetoothd) → `ay`.
    static func token(in serviceData: DBusValue?) -> Token? {
        guard case .dictionary(_, _, let entries)? = serviceData else { return nil }
        for entry in entries where entry.key.string?.lowercased() == TokenFrame.serviceUUID {
            guard let bytes = BlueZObjects.unwrapped(entry.value).bytes else { return nil }
            return TokenFrame.token(inServiceData: bytes)
        }
        return nil
    }

    /// Eddystone's service UUID as bluetoothd spells it.
    static let eddystoneUUID = "0000feaa-0000-1000-8000-00805f9b34fb"

    /// A beacon frame from `ServiceData` (`a{sv}`, Eddystone under 0xFEAA)
    /// or `ManufacturerData` (`a{qv}`, iBeacon under Apple's 0x004C, without
    /// the company id). Eddystone beacons send their frames in turn under the
    /// one UUID: bluetoothd keeps the latest, each reported as it comes.
    static func beacon(serviceData: DBusValue?, manufacturerData: DBusValue?) -> BeaconFrame? {
        if case .dictionary(_, _, let entries)? = serviceData {
            for entry in entries where entry.key.string?.lowercased() == eddystoneUUID {
                if let bytes = BlueZObjects.unwrapped(entry.value).bytes,
                   let frame = BeaconFrame.parse(eddystoneServiceData: bytes) { return frame }
            }
        }
        if case .dictionary(_, _, let entries)? = manufacturerData {
            for entry in entries where entry.key == .uint16(IBeacon.appleCompanyID) {
                if let bytes = BlueZObjects.unwrapped(entry.value).bytes,
                   let frame = BeaconFrame.parse(appleManufacturerData: bytes) { return frame }
            }
        }
        return nil
    }

    /// The signal strength expected at one metre: from the advertised transmit
    /// power when there is one (about 41 dB of loss over the first metre at
    /// 2.4 GHz), else the configured reference.
    func referencePower(default reference: Int) -> Int {
        txPower.map { $0 - 41 } ?? reference
    }
}
