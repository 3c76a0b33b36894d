import Foundation
import Synchronization

/// bluetoothd's stand-in (python/bluez_standin.py) as org.bluez on a private
/// bus of its own, as the system bus would be: what nearbyd calls, and what a
/// test makes the radio do. Driven with busctl, a client written by others.
public final class BlueZStandIn: Sendable {
    public static let serviceUUID = "9a6bac06-7789-4cd3-b56f-cdcc43b8183b"
    /// The UUID in the byte order of advertising data.
    public static let serviceUUIDLittleEndianHex = "3b18b843cccd6fb5d34c897706ac6b9a"

    public let bus: PrivateBus
    private let adapters: [String]
    private let process: Mutex<ChildProcess?>

    /// One BlueZ call nearbyd made, as the stand-in answered it.
    public struct Call: Decodable, Sendable, CustomStringConvertible {
        public let member: String
        public let path: String
        /// The arguments as JSON (keys sorted), for exact comparison.
        public let args: String
        /// "ok" or the error name it was answered with.
        public let outcome: String
        /// For a successful call: how many successful calls to `member` there were, this one included.
        public let n: Int?
        /// For RegisterAdvertisement: what the stand-in read back from nearbyd's object.
        public let advertisement: Advertisement?
        /// For RegisterMonitor: the monitors' properties read back, JSON (keys sorted, bytes in hex).
        public let monitors: String?

        public var description: String { "\(member) \(path) \(args) -> \(outcome)" }
    }

    public struct Advertisement: Decodable, Sendable {
        public let type: String
        public let properties: [String]
        public let serviceData: [String: String]
        /// The advertising data bluetoothd would put on air, hex.
        public let data: String

        enum CodingKeys: String, CodingKey {
            case type, properties, data
            case serviceData = "service_data"
        }
    }

    /// `adapters` as `hci0`, `hci1:off`, `hci0:nomonitor`; `running: false`
    /// leaves bluetoothd stopped until ``start()``. `policy` is the bus's (by
    /// default, anyone may do anything).
    public init(adapters: [String] = ["hci0"], running: Bool = true, policy: PrivateBus.Policy = .open) async throws {
        bus = try await PrivateBus(policy: policy)
        self.adapters = adapters
        process = Mutex(nil)
        if running { try await start() }
    }

    /// The `[ble]` section of a daemon that uses this stand-in.
    public func configuration(_ extra: String = "") -> String {
        "backend = \"bluez\"\nbluez-bus = \"\(bus.address)\"\n\(extra)"
    }

    public func start() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/bluez_standin.py").path
        let child = try await ChildProcess(name: "bluez-standin", executable: "/usr/bin/python3",
                                           arguments: [script, "--bus", bus.address] + adapters.flatMap { ["--adapter", $0] })
        try await child.waitForLine(containing: "ready")
        process.withLock { $0 = child }
    }

    /// Kills it outright, as a crashing bluetoothd.
    public func kill() async {
        guard let child = process.withLock({ $0 }) else { return }
        child.signal(SIGKILL)
        _ = try? await child.waitForExit()
    }

    public func stop() async {
        await process.withLock({ $0 })?.stop()
        await bus.stop()
    }

    public var output: String { process.withLock { $0 }?.output ?? "" }

    /// Every call answered so far, oldest first.
    public var calls: [Call] {
        (process.withLock { $0 }?.lines.values ?? []).compactMap(Self.call)
    }

    /// The first call, made already or still to come, to `member` that `matches`.
    @discardableResult
    public func call(_ member: String, within seconds: Double = 15,
              where matches: @escaping @Sendable (Call) -> Bool = { _ in true }) async throws -> Call {
        guard let child = process.withLock({ $0 }) else { throw ChildProcessError(message: "the stand-in is not running") }
        let line = try await child.lines.first(within: seconds, "a \(member) call") { line in
            Self.call(line).map { $0.member == member && matches($0) } ?? false
        }
        return Self.call(line)!
    }

    private static func call(_ line: String) -> Call? {
        guard line.hasPrefix("call ") else { return nil }
        return try? JSONDecoder().decode(Call.self, from: Data(line.dropFirst(5).utf8))
    }

    // MARK: Making the radio do things (org.nearbyd.test.BlueZ1)

    public func addAdapter(_ name: String, powered: Bool = true, monitors: Bool = true) async throws {
        try await control("AddAdapter", "sbb", [name, "\(powered)", "\(monitors)"])
    }

    public func removeAdapter(_ name: String) async throws {
        try await control("RemoveAdapter", "s", [name])
    }

    public func setPowered(_ name: String, _ powered: Bool) async throws {
        try await control("SetPowered", "sb", [name, "\(powered)"])
    }

    /// A device advertising `serviceData` (UUID → bytes) heard at `rssi`; returns its path.
    @discardableResult
    public func addDevice(on adapter: String, address: String, serviceData: [String: [UInt8]], rssi: Int16 = -60) async throws -> String {
        let output = try await control("AddDevice", "ssa{sv}n", [adapter, address] + Self.arguments(serviceData) + ["\(rssi)"])
        // busctl prints: o "/org/bluez/hci0/dev_…"
        return output.split(separator: "\"").dropFirst().first.map(String.init) ?? ""
    }

    public func updateDevice(_ path: String, serviceData: [String: [UInt8]], rssi: Int16) async throws {
        try await control("UpdateDevice", "oa{sv}n", [path] + Self.arguments(serviceData) + ["\(rssi)"])
    }

    public func removeDevice(_ path: String) async throws {
        try await control("RemoveDevice", "o", [path])
    }

    /// bluetoothd drops every discovery session on `adapter` (Discovering turns false).
    public func dropDiscovery(_ adapter: String) async throws {
        try await control("DropDiscovery", "s", [adapter])
    }

    /// Every later BlueZ call fails with `errorName` (nil: none).
    public func refuse(with errorName: String?) async throws {
        try await control("Refuse", "s", [errorName ?? ""])
    }

    /// bluetoothd calls Release on every registered advertisement and drops it.
    public func releaseAdvertisements() async throws {
        try await control("ReleaseAdvertisements", "", [])
    }

    /// The advertisement monitors report `device` found.
    public func monitorFound(_ device: String) async throws {
        try await control("MonitorFound", "o", [device])
    }

    /// Reports `device` `rate` times a second for `seconds` (a ServiceData and
    /// RSSI change each, as bluetoothd with DuplicateData); returns once the
    /// stand-in says it is done, with how many it sent and in how long.
    public func flood(_ device: String, serviceData: [String: [UInt8]], rate: UInt32, seconds: UInt32) async throws -> (sent: Int, seconds: Double) {
        guard let child = process.withLock({ $0 }) else { throw ChildProcessError(message: "the stand-in is not running") }
        let id = UUID().uuidString
        try await control("Flood", "oa{sv}uus", [device] + Self.arguments(serviceData) + ["\(rate)", "\(seconds)", id])
        let line = try await child.lines.first(within: Double(seconds) * 3 + 10, "the flood's end") { $0.hasPrefix("flooded \(id) ") }
        let parts = line.split(separator: " ")
        return (Int(parts[2]) ?? 0, Double(parts[3]) ?? 0)
    }

    @discardableResult
    private func control(_ member: String, _ signature: String, _ arguments: [String]) async throws -> String {
        let result = try await runProgram("/usr/bin/busctl", ["--address=\(bus.address)", "--", "call", "org.bluez", "/org/nearbyd/test",
                                                              "org.nearbyd.test.BlueZ1", member] + (signature.isEmpty ? [] : [signature]) + arguments)
        guard result.status == 0 else { throw ChildProcessError(message: "busctl \(member) failed: \(result.output)") }
        return result.output
    }

    /// An `a{sv}` of `ay` values, in busctl's notation.
    private static func arguments(_ serviceData: [String: [UInt8]]) -> [String] {
        ["\(serviceData.count)"] + serviceData.sorted { $0.key < $1.key }.flatMap { uuid, bytes in
            [uuid, "ay", "\(bytes.count)"] + bytes.map { "\($0)" }
        }
    }
}
