import Foundation
import NearbyBusContract
import Testing
import TestSupport

/// dbus-policy/org.nearbyd.conf on a bus that denies by default, as the system
/// bus does: who may own org.nearbyd, and what others may call. Needs root, to
/// run programs as another user (nobody).
@Suite(.serialized, .enabled(if: getuid() == 0, "runs programs as nobody, which needs root"))
struct PolicyTests {
    static var policyFile: String { RepositoryFile.path("dbus-policy/org.nearbyd.conf") }

    /// A program run as the unprivileged user nobody.
    func asNobody(_ arguments: [String]) async throws -> ProgramResult {
        try await runProgram("/usr/sbin/runuser", ["-u", "nobody", "--"] + arguments)
    }

    /// Runs `body` with nearbyd (root's) on a bus with the system bus's rules
    /// and the shipped policy; `address` is busctl's `--address=` for it.
    func withDaemon(_ body: (_ address: String) async throws -> Void) async throws {
        let bus = try await PrivateBus(policy: .system(including: [Self.policyFile]))
        let directory = try TemporaryDirectory()
        let daemon = try await ChildProcess(name: "nearbyd", executable: Programs.path("nearbyd"), arguments: [
            "--bus", bus.address, "--server", "http://127.0.0.1:9", "--air-socket", directory.file("none.sock"),
            "--state-dir", directory.file("state"),
        ])
        let outcome: Result<Void, any Error>
        do {
            try await daemon.waitForLine(containing: "nearbyd: ready")
            try await body("--address=\(bus.address)")
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        await daemon.stop()
        await bus.stop()
        directory.remove()
        try outcome.get()
    }

    /// Whether the bus (or nearbyd, as `org.nearbyd.Error.AccessDenied`) refused a busctl call.
    static func refused(_ result: ProgramResult) -> Bool {
        result.output.contains("Access denied") || result.output.contains("AccessDenied")
    }

    @Test func onlyNearbydsUserOrRootMayOwnTheNameAndAnyoneMayUseTheAPI() async throws {
        let bus = try await PrivateBus(policy: .system(including: [Self.policyFile]))
        let directory = try TemporaryDirectory()
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory.path)
        let arguments = ["--bus", bus.address, "--server", "http://127.0.0.1:9", "--air-socket", directory.file("none.sock")]

        // A copy nobody can reach: the build directory may sit under one only its owner can enter.
        let reachable = directory.file("nearbyd")
        try FileManager.default.copyItem(atPath: Programs.path("nearbyd"), toPath: reachable)
        let impostor = try await asNobody([reachable] + arguments + ["--state-dir", directory.file("nobody")])
        #expect(impostor.status == 1)
        #expect(impostor.output.contains("org.nearbyd"), "\(impostor.output)")

        let daemon = try await ChildProcess(name: "nearbyd", executable: Programs.path("nearbyd"),
                                            arguments: arguments + ["--state-dir", directory.file("root")])
        try await daemon.waitForLine(containing: "nearbyd: ready")

        let address = "--address=\(bus.address)"
        let created = try await asNobody(["/usr/bin/busctl", address, "call", "org.nearbyd", "/org/nearbyd",
                                          "org.nearbyd.Nearby1", "CreateManager", "sa{sv}", "key", "0"])
        #expect(created.status == 0, "\(created.output)")
        let property = try await asNobody(["/usr/bin/busctl", address, "get-property", "org.nearbyd", "/org/nearbyd",
                                           "org.nearbyd.Nearby1", "Version"])
        #expect(property.output.contains("0.1.0"), "\(property.output)")
        // Every client interface is open: a call of Upstream1 reaches nearbyd (which finds no such object there).
        let upstream = try await asNobody(["/usr/bin/busctl", address, "call", "org.nearbyd", "/org/nearbyd",
                                           "org.nearbyd.Upstream1", "SendMessage", "a{ss}ssx", "0", "shop@nearby.example", "m", "60"])
        #expect(upstream.status != 0)
        #expect(!Self.refused(upstream), "\(upstream.output)")
        // Interfaces the policy does not open are refused by the bus itself.
        let closed = try await asNobody(["/usr/bin/busctl", address, "call", "org.nearbyd", "/org/nearbyd",
                                         "org.nearbyd.PermissionAgent1", "RequestPermission"])
        #expect(closed.status != 0)
        #expect(Self.refused(closed), "\(closed.output)")

        // Daemon-wide settings are root's; a client's own objects stay settable.
        let debug = try await asNobody(["/usr/bin/busctl", address, "set-property", "org.nearbyd", "/org/nearbyd",
                                        "org.nearbyd.Nearby1", "DebugLogging", "b", "true"])
        #expect(debug.status != 0)
        #expect(Self.refused(debug), "\(debug.output)")
        let rootDebug = try await runProgram("/usr/bin/busctl", [address, "set-property", "org.nearbyd", "/org/nearbyd",
                                                                 "org.nearbyd.Nearby1", "DebugLogging", "b", "true"])
        #expect(rootDebug.status == 0, "\(rootDebug.output)")

        await daemon.stop()
        await bus.stop()
        directory.remove()
    }

    /// Every member of every interface a client may use reaches nearbyd when
    /// another user calls it on a bus with the system bus's rules and the
    /// shipped policy: methods (with no arguments, which nearbyd answers
    /// `InvalidArgs`, or on no object, `UnknownObject`), properties read and,
    /// where clients write them, written; root-only writes are refused by the
    /// bus itself. The root object's members come from its live
    /// introspection, read as that user; the other objects' from the
    /// contract, which BusContractTests holds their introspection to.
    @Test func anotherUserReachesEveryClientMemberAndNoRootOnlyOne() async throws {
        try await withDaemon { address in
            func busctl(_ arguments: [String]) async throws -> ProgramResult {
                try await asNobody(["/usr/bin/busctl", address] + arguments)
            }
            let refusedByTheBus = Self.refused

            let introspection = try await busctl(["introspect", "--xml-interface", NearbyBusContract.busName, NearbyBusContract.rootPath])
            #expect(introspection.status == 0, "\(introspection.output)")
            for method in NearbyBusContract.nearby.methods {
                #expect(introspection.output.contains("<method name=\"\(method.name)\">"), "\(method.name) in the live introspection")
            }

            for interface in NearbyBusContract.interfaces where interface.caller == .anyClient {
                // The root object's interface there; the others on a client object that is not there.
                let path = interface == NearbyBusContract.nearby ? NearbyBusContract.rootPath : NearbyBusContract.clientExportRoot + "/none"
                for method in interface.methods {
                    let result = try await busctl(["call", NearbyBusContract.busName, path, interface.name, method.name])
                    #expect(result.status != 0 && !refusedByTheBus(result), "\(interface.name).\(method.name): \(result.output)")
                }
                let all = try await busctl(["call", NearbyBusContract.busName, path, "org.freedesktop.DBus.Properties", "GetAll",
                                            "s", interface.name])
                #expect(!refusedByTheBus(all), "\(interface.name) GetAll: \(all.output)")
                for property in interface.properties {
                    let get = try await busctl(["get-property", NearbyBusContract.busName, path, interface.name, property.name])
                    #expect(!refusedByTheBus(get), "\(interface.name).\(property.name) read: \(get.output)")
                    guard property.access != .read else { continue }
                    let value = try #require(["b": "false"][property.type], "a value of type \(property.type) to write")
                    let set = try await busctl(["set-property", NearbyBusContract.busName, path, interface.name, property.name,
                                                property.type, value])
                    #expect(refusedByTheBus(set) == (property.access == .readWriteRoot), "\(interface.name).\(property.name) written: \(set.output)")
                }
            }
            // The interfaces nearbyd calls on clients are closed to everyone else.
            for interface in NearbyBusContract.interfaces where interface.caller == .nearbyd {
                for method in interface.methods {
                    let result = try await busctl(["call", NearbyBusContract.busName, NearbyBusContract.rootPath, interface.name, method.name])
                    #expect(refusedByTheBus(result), "\(interface.name).\(method.name): \(result.output)")
                }
            }

        }
    }

    /// Decisions are per user: another user may neither see nor change root's;
    /// root may set anyone's. (A manager's own PermissionGranted answers only its
    /// connection, as every client object does: BadInputTests.)
    @Test func onlyTheSameUserOrRootMaySeeOrChangeADecision() async throws {
        try await withDaemon { address in
            func call(_ method: String, _ signature: String, _ arguments: [String], asNobody: Bool = false) async throws -> ProgramResult {
                let command = ["/usr/bin/busctl", address, "call", "org.nearbyd", "/org/nearbyd", "org.nearbyd.Nearby1", method,
                               signature] + arguments
                return asNobody ? try await self.asNobody(command) : try await runProgram(command[0], Array(command.dropFirst()))
            }

            let granted = try await call("SetPermission", "sba{sv}", ["org.example.App", "true", "0"])
            #expect(granted.status == 0, "\(granted.output)")
            let theft = try await call("SetPermission", "sba{sv}", ["org.example.App", "false", "1", "User", "u", "0"], asNobody: true)
            #expect(theft.output.contains("org.nearbyd.Error.AccessDenied") || theft.output.contains("only root"), "\(theft.output)")
            let peek = try await call("GetPermission", "sa{sv}", ["org.example.App", "1", "User", "u", "0"], asNobody: true)
            #expect(peek.status != 0, "\(peek.output)")
            // Nobody's own decision about the same app is a different one.
            let own = try await call("GetPermission", "sa{sv}", ["org.example.App", "0"], asNobody: true)
            #expect(own.output.contains("undecided"), "\(own.output)")
            let forNobody = try await call("SetPermission", "sba{sv}", ["org.example.App", "false", "1", "User", "u", "65534"])
            #expect(forNobody.status == 0, "\(forNobody.output)")
            let seen = try await call("GetPermission", "sa{sv}", ["org.example.App", "0"], asNobody: true)
            #expect(seen.output.contains("denied") && seen.output.contains("user"), "\(seen.output)")
            let rootStill = try await call("GetPermission", "sa{sv}", ["org.example.App", "0"])
            #expect(rootStill.output.contains("granted"), "\(rootStill.output)")
        }
    }
}
