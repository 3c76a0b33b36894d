import Foundation
import NearbyMessages
import TestSupport

/// nearbyd's resident memory idle and holding many live publications, against
/// the reference C service's.
enum MemoryBenchmark {
    static func run(locations: Locations, publications count: Int) async throws {
        let cluster = try await Cluster(options: Cluster.Options(
            // One manager holds them all: its user's limit (1,024 by default, and the manager's at most that) raised with it.
            extraConfiguration: "[limits]\nmax-objects-per-user = \(count)\nmax-objects-per-manager = \(count)\n",
            serverConfiguration: "[limits]\nmax-publications-per-device = \(count)\n", daemonLogLevel: "info"))
        let key = try await cluster.createProject("memory")
        let device = try await cluster.addDevice("A", at: (0, 0))
        let reference = try await ChildProcess(name: "svc_sdbus", executable: locations.program("svc_sdbus"),
                                               arguments: ["probe.Ref"],
                                               environment: ["DBUS_SESSION_BUS_ADDRESS": device.busAddress])
        try await ThroughputBenchmark.waitForName("probe.Ref", on: device.busAddress)
        let manager = try await MessageManager(apiKey: key, bus: .address(device.busAddress))
        let idle = try residentKiB(device.daemon.pid)
        let referenceIdle = try residentKiB(reference.pid)

        var held: [Publication] = []
        held.reserveCapacity(count)
        for index in 0..<count {
            let content = Data("publication number \(index) with a body of about a hundred bytes, as a small message is".utf8)
            held.append(try await manager.publication(of: Message(content: content, type: "memory")))
        }
        // Measured once the server holds them all: the daemon's queues are then empty.
        while try await held[count - 1].status != "active" {
            try await Task.sleep(for: .milliseconds(100))
        }
        let loaded = try residentKiB(device.daemon.pid)
        await reference.stop()
        await cluster.stop()

        print("""
            resident memory (VmRSS):
            | process | idle MiB | with \(count) publications MiB | per publication |
            | --- | --- | --- | --- |
            | reference C sd-bus service | \(format(Double(referenceIdle) / 1024)) | | |
            | nearbyd | \(format(Double(idle) / 1024)) | \(format(Double(loaded) / 1024)) | \(format(Double(loaded - idle) * 1024 / Double(count), 0)) B |
            nearbyd idle / reference idle: \(format(Double(idle) / Double(referenceIdle), 1))
            """)
        withExtendedLifetime(held) {}
    }

    private static func residentKiB(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kib = Int(line.split(separator: " ").dropFirst().first ?? "") else {
            throw ChildProcessError(message: "no VmRSS for \(pid)")
        }
        return kib
    }
}
