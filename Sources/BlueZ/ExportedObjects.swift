import BluetoothLE
import DBus
import NearbyCore

/// One token on air: the `org.bluez.LEAdvertisement1` object that bluetoothd
/// reads (through Properties.GetAll) when it is registered. A non-connectable
/// broadcast with nearbyd's service data and nothing else, so the frame is the
/// 26 bytes of ``TokenFrame`` and fits a legacy advertisement with room for the
/// Flags the kernel may add (doc/architecture.md, "BLE: what the backends rely
/// on", Advertising data and Flags).
@BusActor
final class LEAdvertisement {
    static let interfaceName = "org.bluez.LEAdvertisement1"

    let token: Token
    let path: ObjectPath
    /// Called when bluetoothd drops the advertisement by itself.
    let released: @BusActor (Token) -> Void
    var exported: ExportedObject?

    init(token: Token, under root: ObjectPath, released: @escaping @BusActor (Token) -> Void) {
        self.token = token
        path = root.child("advertisement_" + token.hex)
        self.released = released
    }

    static let interface = Interface<LEAdvertisement>(
        interfaceName,
        methods: [
            // bluetoothd calls it when the adapter goes or the advertisement times
            // out; it is not called for our own UnregisterAdvertisement.
            Method("Release") { advertisement, _ in advertisement.released(advertisement.token) },
        ],
        properties: [
            Property("Type", "s", emitsChange: false) { _, _ in .string("broadcast") },
            Property("ServiceData", "a{sv}", emitsChange: false) { advertisement, _ in
                .dictionary(key: "s", value: "v", [
                    DictEntry(.string(TokenFrame.serviceUUID), .variant(.bytes(advertisement.token.bytes))),
                ])
            },
        ])
}

/// The advertisement monitor of low-power scanning: bluetoothd matches every
/// advertisement against its patterns (AD type 0x21 starting with nearbyd's
/// service UUID; Eddystone's and iBeacon's frames for beacon subscriptions)
/// without a discovery session, passively, and calls `DeviceFound` and
/// `DeviceLost` as devices come and go.
///
/// bluetoothd finds monitors through the ObjectManager of the path given to
/// `RegisterMonitor`, so the root serves one.
@BusActor
final class AdvertisementMonitor {
    static let interfaceName = "org.bluez.AdvertisementMonitor1"

    let root: ObjectPath
    let path: ObjectPath
    /// RSSILowTimeout: how long a device may stay unheard before DeviceLost.
    let lostTimeoutSeconds: UInt16
    let found: @BusActor (ObjectPath) -> Void
    let lost: @BusActor (ObjectPath) -> Void
    let released: @BusActor () -> Void
    private var exported: ExportedObject?
    private var objectManager: ObjectManagerRegistration?

    init(root: ObjectPath, lostTimeoutSeconds: UInt16,
         found: @escaping @BusActor (ObjectPath) -> Void, lost: @escaping @BusActor (ObjectPath) -> Void,
         released: @escaping @BusActor () -> Void) {
        self.root = root
        path = root.child("token_frame")
        self.lostTimeoutSeconds = lostTimeoutSeconds
        self.found = found
        self.lost = lost
        self.released = released
    }

    func export(on connection: BusConnection, access: Access) throws(DBusError) {
        exported = try connection.export([Self.interface.bind(self)], at: path, access: access)
        objectManager = try connection.addObjectManager(at: root)
    }

    func unexport() {
        exported?.unregister()
        exported = nil
        objectManager?.cancel()
        objectManager = nil
    }

    static let interface = Interface<AdvertisementMonitor>(
        interfaceName,
        methods: [
            Method("Release") { monitor, _ in monitor.released() },
            Method("Activate") { _, _ in },
            Method("DeviceFound", inputs: [Argument("device", "o")]) { monitor, call throws(DBusError) in
                monitor.found(try call.arguments.read(ObjectPath.self))
            },
            Method("DeviceLost", inputs: [Argument("device", "o")]) { monitor, call throws(DBusError) in
                monitor.lost(try call.arguments.read(ObjectPath.self))
            },
        ],
        // Any signal counts as in range: nearness is the server's and the
        // path-loss estimate's business. The thresholds are set so that
        // bluetoothd reports found and lost once each instead of calling
        // DeviceFound for every advertisement.
        properties: [
            Property("Type", "s", emitsChange: false) { _, _ in .string("or_patterns") },
            Property("Patterns", "a(yyay)", emitsChange: false) { _, _ in
                .array(element: "(yyay)", [
                    .structure([.byte(0), .byte(TokenFrame.serviceData128), .bytes(TokenFrame.serviceUUIDLittleEndian)]),
                    // Service Data - 16-bit UUID 0xFEAA, little-endian.
                    .structure([.byte(0), .byte(0x16), .bytes([0xAA, 0xFE])]),
                    // Apple manufacturer data of type iBeacon, length 0x15.
                    .structure([.byte(0), .byte(0xFF), .bytes([0x4C, 0x00, 0x02, 0x15])]),
                ])
            },
            Property("RSSILowThreshold", "n", emitsChange: false) { _, _ in .int16(-127) },
            Property("RSSIHighThreshold", "n", emitsChange: false) { _, _ in .int16(-127) },
            Property("RSSIHighTimeout", "q", emitsChange: false) { _, _ in .uint16(1) },
            Property("RSSILowTimeout", "q", emitsChange: false) { monitor, _ in .uint16(monitor.lostTimeoutSeconds) },
            Property("RSSISamplingPeriod", "q", emitsChange: false) { _, _ in .uint16(0) },
        ])
}
