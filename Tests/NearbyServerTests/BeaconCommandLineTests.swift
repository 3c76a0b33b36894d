import Foundation
@testable import NearbyServer
import ServerAPI
import Testing

/// `nearby-server project admin-key` and `server-key`, `beacon ...` and `namespace ...`, run as
/// the built executable on a temporary database.
@Suite(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"))
struct BeaconCommandLineTests {
    /// Runs `body` with the `--database` arguments of a fresh database that
    /// has the project alpha; returns what `project create` printed.
    private func withProject(_ body: ([String], [String: String]) async throws -> Void) async throws {
        try await withTemporaryDirectory { directory in
            let database = ["--database", directory.appendingPathComponent("db/nearby.sqlite").path]
            let created = try await run(["project", "create", "alpha", "--json"] + database)
            #expect(created.status == 0)
            let keys = try #require(try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: String])
            try await body(database, keys)
        }
    }

    @Test func serverKeyIsIssuedAgain() async throws {
        try await withProject { database, keys in
            let storage = try SQLiteStorage(path: database[1])
            #expect(try await storage.isServerKey(Credentials.hash(keys["serverKey"] ?? ""), of: "alpha"))
            let issued = try await run(["project", "server-key", "alpha", "--json"] + database)
            #expect(issued.status == 0)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(issued.output.utf8)) as? [String: String])
            let newKey = try #require(json["serverKey"])
            #expect(newKey.count == 43)
            #expect(try await storage.isServerKey(Credentials.hash(newKey), of: "alpha"))
            #expect(try await !storage.isServerKey(Credentials.hash(keys["serverKey"] ?? ""), of: "alpha"))
            let human = try await run(["project", "server-key", "alpha"] + database)
            #expect(human.output.wholeMatch(of: #/project: alpha\nserver-key: [A-Za-z0-9_-]{43}\n/#) != nil)
            let missing = try await run(["project", "server-key", "nope"] + database)
            #expect(missing.status == 1)
            #expect(missing.errors == "nearby-server: no project named 'nope'\n")
        }
    }

    @Test func adminKeyIsIssuedAgain() async throws {
        try await withProject { database, keys in
            let issued = try await run(["project", "admin-key", "alpha", "--json"] + database)
            #expect(issued.status == 0)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(issued.output.utf8)) as? [String: String])
            #expect(json["project"] == "alpha")
            let newKey = try #require(json["adminKey"])
            #expect(newKey.count == 43)
            #expect(newKey != keys["adminKey"])

            let storage = try SQLiteStorage(path: database[1])
            #expect(try await storage.project(adminKeyHash: Credentials.hash(newKey))?.name == "alpha")
            #expect(try await storage.project(adminKeyHash: Credentials.hash(keys["adminKey"] ?? "")) == nil)
            // The API key is untouched.
            #expect(try await storage.project(apiKeyHash: Credentials.hash(keys["apiKey"] ?? ""))?.name == "alpha")

            let human = try await run(["project", "admin-key", "alpha"] + database)
            #expect(human.output.wholeMatch(of: #/project: alpha\nadmin-key: [A-Za-z0-9_-]{43}\n/#) != nil)
            let missing = try await run(["project", "admin-key", "nope"] + database)
            #expect(missing.status == 1)
            #expect(missing.errors == "nearby-server: no project named 'nope'\n")
        }
    }

    @Test func beaconCommands() async throws {
        try await withProject { database, _ in
            let project = ["--project", "alpha"] + database
            let hex = "0102030405060708090a0b0c0d0e0f10"
            let registered = try await run(["beacon", "register", "--type", "eddystone", "--id", hex, "--description", "front door"]
                + project)
            #expect(registered.status == 0)
            #expect(registered.output == "beacon: beacons/3!\(hex)\ntype: EDDYSTONE\nstatus: ACTIVE\ndescription: front door\n")

            // A UUID keeps its dashes; --json prints the API's Beacon.
            let uuid = "e2c56db5-dffb-48d2-b060-d0f5a71096e0"
            let iBeacon = try await run(["beacon", "register", "--type", "ibeacon", "--id", uuid + "00010002", "--inactive", "--json"]
                + project)
            #expect(iBeacon.status == 0)
            let beacon = try JSONDecoder().decode(Beacon.self, from: Data(iBeacon.output.utf8))
            #expect(beacon.beaconName == "beacons/1!e2c56db5dffb48d2b060d0f5a71096e000010002")
            #expect(beacon.status == .inactive)
            #expect(beacon.advertisedId?.type == .iBeacon)

            let again = try await run(["beacon", "register", "--type", "eddystone", "--id", hex] + project)
            #expect(again.status == 1)
            #expect(again.errors == "nearby-server: beacon 'beacons/3!\(hex)' is already registered\n")
            let short = try await run(["beacon", "register", "--type", "altbeacon", "--id", hex] + project)
            #expect(short.status == 1)
            #expect(short.errors == "nearby-server: advertisedId.id is 16 bytes; ALTBEACON ids are 20 bytes\n")
            #expect(try await run(["beacon", "register", "--type", "uribeacon", "--id", hex] + project).status == 64)
            let nobody = try await run(["beacon", "list", "--project", "nope"] + database)
            #expect(nobody.status == 1)
            #expect(nobody.errors == "nearby-server: no project named 'nope'\n")

            let listed = try await run(["beacon", "list"] + project)
            #expect(listed.output == """
                beacons/3!\(hex)\tEDDYSTONE\tACTIVE\tfront door
                beacons/1!e2c56db5dffb48d2b060d0f5a71096e000010002\tIBEACON\tINACTIVE\t

                """)
            #expect(try await run(["beacon", "list", "--filter", "status:inactive type:ibeacon"] + project).output.hasPrefix("beacons/1!"))
            #expect(try await run(["beacon", "list", "--filter", "description:nothing"] + project).output == "no beacons\n")
            let listedJSON = try await run(["beacon", "list", "--json"] + project)
            #expect(try JSONDecoder().decode([Beacon].self, from: Data(listedJSON.output.utf8)).count == 2)

            let name = "beacons/3!\(hex)"
            #expect(try await run(["beacon", "get", "3!\(hex)"] + project).output == registered.output)
            #expect(try await run(["beacon", "deactivate", name] + project).output.contains("status: INACTIVE\n"))
            #expect(try await run(["beacon", "activate", name] + project).output.contains("status: ACTIVE\n"))
            let decommissioned = try await run(["beacon", "decommission", name, "--json"] + project)
            #expect(try JSONDecoder().decode(Beacon.self, from: Data(decommissioned.output.utf8)).status == .decommissioned)
            let revived = try await run(["beacon", "activate", name] + project)
            #expect(revived.status == 1)
            #expect(revived.errors == "nearby-server: beacon '\(name)' is decommissioned; it cannot be activated\n")

            let deleted = try await run(["beacon", "delete", "3!\(hex)"] + project)
            #expect(deleted.output == "deleted \(name)\n")
            let gone = try await run(["beacon", "get", name] + project)
            #expect(gone.status == 1)
            #expect(gone.errors == "nearby-server: project 'alpha' has no beacon '\(name)'\n")
            let badName = try await run(["beacon", "get", "7!00"] + project)
            #expect(badName.status == 1)
            #expect(badName.errors.split(separator: "\n").count == 1)
        }
    }

    @Test func attachmentAndNamespaceCommands() async throws {
        try await withProject { database, _ in
            let project = ["--project", "alpha"] + database
            let name = "beacons/5!" + String(repeating: "ab", count: 20)
            #expect(try await run(["beacon", "register", "--type", "altbeacon", "--id", String(repeating: "ab", count: 20)] + project)
                .status == 0)

            let added = try await run(["beacon", "attachment", "add", name, "--type", "greeting", "--data", "hello"] + project)
            #expect(added.status == 0)
            let fields = added.output.dropLast().split(separator: "\t")
            #expect(fields.count == 3)
            #expect(fields.first?.hasPrefix("\(name)/attachments/") == true)
            #expect(fields.dropFirst().joined(separator: "\t") == "alpha/greeting\taGVsbG8=")
            let id = String(fields[0].split(separator: "/").last ?? "")

            let raw = try await run(["beacon", "attachment", "add", name, "--type", "raw", "--data-base64", "AQID", "--json"] + project)
            let attachment = try JSONDecoder().decode(BeaconAttachment.self, from: Data(raw.output.utf8))
            #expect(attachment.namespacedType == "alpha/raw")
            #expect(attachment.data == Data([1, 2, 3]))
            #expect(try await run(["beacon", "attachment", "add", name, "--type", "x"] + project).status == 64)
            #expect(try await run(["beacon", "attachment", "add", name, "--type", "x", "--data", "a", "--data-base64", "AQ=="] + project)
                .status == 64)
            let foreign = try await run(["beacon", "attachment", "add", name, "--namespace", "beta", "--type", "x", "--data", "a"]
                + project)
            #expect(foreign.status == 1)
            #expect(foreign.errors == "nearby-server: project 'alpha' does not own namespace 'beta'\n")

            let listed = try await run(["beacon", "attachment", "list", name] + project)
            #expect(listed.output.split(separator: "\n").map { $0.split(separator: "\t").dropFirst().joined(separator: " ") }
                == ["alpha/greeting aGVsbG8=", "alpha/raw AQID"])
            #expect(try await run(["beacon", "attachment", "list", name, "--type", "alpha/raw"] + project).output.contains("AQID"))
            let listedJSON = try await run(["beacon", "attachment", "list", name, "--type", "*/*", "--json"] + project)
            #expect(try JSONDecoder().decode([BeaconAttachment].self, from: Data(listedJSON.output.utf8)).count == 2)

            #expect(try await run(["beacon", "attachment", "delete", name, id] + project).output == "deleted attachment \(id)\n")
            let again = try await run(["beacon", "attachment", "delete", name, id] + project)
            #expect(again.status == 1)
            #expect(again.errors == "nearby-server: project 'alpha' has no attachment '\(name)/attachments/\(id)'\n")
            #expect(try await run(["beacon", "attachment", "list", name, "--type", "alpha/greeting"] + project).output
                == "no attachments\n")

            #expect(try await run(["namespace", "list"] + project).output == "namespaces/alpha\tUNLISTED\n")
            #expect(try await run(["namespace", "set-visibility", "alpha", "public"] + project).output == "namespaces/alpha\tPUBLIC\n")
            let namespaces = try await run(["namespace", "list", "--json"] + project)
            #expect(try JSONDecoder().decode([BeaconNamespace].self, from: Data(namespaces.output.utf8))
                == [BeaconNamespace(namespaceName: "namespaces/alpha", servingVisibility: .public)])
            let other = try await run(["namespace", "set-visibility", "namespaces/beta", "public"] + project)
            #expect(other.status == 1)
            #expect(other.errors == "nearby-server: project 'alpha' has no namespace 'namespaces/beta'\n")
            #expect(try await run(["namespace", "set-visibility", "alpha", "secret"] + project).status == 64)
        }
    }

    /// The server answers from the database: what the CLI registers while it
    /// runs is observed at once.
    @Test func theRunningServerSeesWhatTheCommandsDo() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let project = ["--project", "alpha", "--database", harness.server.configuration.databasePath]
            let id = advertisedID(.eddystoneEID, seed: 0x33)
            let hex = id.id.map { String(format: "%02x", $0) }.joined()
            #expect(try await run(["beacon", "register", "--type", "eddystone-eid", "--id", hex] + project).status == 0)
            #expect(try await run(["beacon", "attachment", "add", id.beaconName, "--type", "t", "--data", "d"] + project).status == 0)
            #expect(try await harness.observed(alpha, [id], ["*"]) == [id.beaconName: ["alpha/t=d"]])
            #expect(try await run(["beacon", "deactivate", id.beaconName] + project).status == 0)
            #expect(try await harness.observed(alpha, [id], ["*"]) == [:])
        }
    }

    @Test func helpSaysWhatIsPrintedAndTheExitStatus() async throws {
        for command in [["beacon", "register"], ["beacon", "list"], ["beacon", "decommission"], ["beacon", "attachment", "add"],
                        ["namespace", "set-visibility"], ["project", "admin-key"]] {
            let help = try await run(command + ["--help"])
            #expect(help.status == 0)
            #expect(help.output.contains("OVERVIEW: "), "\(command)")
            #expect(help.output.contains("Output"), "\(command)")
            #expect(help.output.contains("exit status") || help.output.contains("Exit status"), "\(command)")
        }
    }
}
