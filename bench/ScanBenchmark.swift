import Foundation
import NearbyMessages
import TestSupport

/// The CPU nearbyd's BlueZ backend spends on advertisement reports: bluetoothd's
/// stand-in reports one device `rate` times a second (a ServiceData and RSSI
/// PropertiesChanged each, as bluetoothd does with DuplicateData) while nearbyd
/// listens for a subscription, and the reference C consumer (scan_floor) reads
/// the same signals on the same bus.
enum ScanBenchmark {
    static func run(locations: Locations, rate: UInt32, seconds: UInt32, rounds: Int) async throws {
        let bluez = try await BlueZStandIn()
        let cluster = try await Cluster(options: Cluster.Options(daemonLogLevel: "info"))
        let key = try await cluster.createProject("scan")
        let device = try await cluster.addDevice("A", ble: bluez.configuration())
        let manager = try await MessageManager(apiKey: key, bus: .address(device.busAddress))
        let subscription = try await manager.subscription(messageFound: { _, _ in })
        try await bluez.call("StartDiscovery") { $0.outcome == "ok" }
        let token: [UInt8] = [0x6e, 0x65, 0x61, 0x72, 0x62, 0x79, 0x64, 0x21]
        let peer = try await bluez.addDevice(on: "hci0", address: "C0:00:00:00:00:01",
                                             serviceData: [BlueZStandIn.serviceUUID: token])
        let floor = try await ChildProcess(name: "scan_floor", executable: locations.program("scan_floor"), arguments: [],
                                           environment: ["DBUS_SESSION_BUS_ADDRESS": bluez.bus.address])
        try await floor.waitForLine(containing: "listening")

        var ours: [Double] = [], theirs: [Double] = [], sent = 0
        for _ in 0..<rounds {
            let before = (cpuSeconds(of: device.daemon.pid), cpuSeconds(of: floor.pid))
            let flood = try await bluez.flood(peer, serviceData: [BlueZStandIn.serviceUUID: token], rate: rate, seconds: seconds)
            let after = (cpuSeconds(of: device.daemon.pid), cpuSeconds(of: floor.pid))
            // Core-milliseconds per second, per 1,000 reports per second.
            let scale = 1000 / flood.seconds * 1000 / (Double(flood.sent) / flood.seconds)
            ours.append((after.0 - before.0) * scale)
            theirs.append((after.1 - before.1) * scale)
            sent += flood.sent
        }
        floor.signal(SIGTERM)
        let counted = try await floor.waitForLine(containing: "tokens")
        withExtendedLifetime(subscription) {}
        await floor.stop()
        await cluster.stop()
        await bluez.stop()

        let median = { (values: [Double]) in Sample(values).p50 }
        print("""
            BLE scanning through BlueZ, \(rate) reports/s for \(seconds) s, medians of \(rounds) rounds \
            (\(sent) reports; the reference read \(counted.split(separator: " ").last ?? "?") tokens):
            | consumer | CPU per 1,000 reports/s (ms of a core per second) | ratio to reference |
            | --- | --- | --- |
            | nearbyd (BlueZ backend) | \(format(median(ours))) | \(format(median(ours) / median(theirs), 2)) |
            | reference (C sd-bus, scan_floor) | \(format(median(theirs))) | 1.00 |
            """)
    }
}
