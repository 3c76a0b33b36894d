import Foundation
import Testing
import TestSupport

/// The `nearby-server` executable, where the build put it next to the tests.
let executable: URL? = {
    let candidate = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("nearby-server")
    return FileManager.default.isExecutableFile(atPath: candidate.path) ? candidate : nil
}()

/// A finished run of the executable.
struct Run {
    var status: Int32
    var output: String
    var errors: String
}

/// Runs the executable to completion (a minute at most).
func run(_ arguments: [String]) async throws -> Run {
    let result = try await runProgramSeparately(try #require(executable).path, arguments)
    return Run(status: result.status, output: result.output, errors: result.errors)
}

@Suite(.enabled(if: executable != nil, "needs the nearby-server executable (swift build --build-tests builds it)"))
struct CommandLineTests {
    @Test func projectCommands() async throws {
        try await withTemporaryDirectory { directory in
            let database = ["--database", directory.appendingPathComponent("db/nearby.sqlite").path]
            let created = try await run(["project", "create", "alpha", "--json"] + database)
            #expect(created.status == 0)
            let json = try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: String]
            #expect(json?["project"] == "alpha")
            #expect(json?["namespace"] == "alpha")
            #expect(json?["apiKey"]?.count == 43)
            #expect(json?["adminKey"]?.count == 43)
            #expect(json?["serverKey"]?.count == 43)
            #expect(Set([json?["adminKey"], json?["apiKey"], json?["serverKey"]]).count == 3)

            let human = try await run(["project", "create", "beta"] + database)
            #expect(human.status == 0)
            #expect(human.output.wholeMatch(of: #/project: beta\napi-key: [A-Za-z0-9_-]{43}\nadmin-key: [A-Za-z0-9_-]{43}\nserver-key: [A-Za-z0-9_-]{43}\n/#) != nil)

            let duplicate = try await run(["project", "create", "alpha"] + database)
            #expect(duplicate.status == 1)
            #expect(duplicate.errors == "nearby-server: a project named 'alpha' already exists\n")

            let invalid = try await run(["project", "create", "Not_Valid"] + database)
            #expect(invalid.status == 1)
            #expect(invalid.errors.split(separator: "\n").count == 1)

            let listed = try await run(["project", "list", "--json"] + database)
            let projects = try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [[String: Any]]
            #expect(projects?.compactMap { $0["project"] as? String } == ["alpha", "beta"])

            #expect(try await run(["project", "delete", "alpha"] + database).status == 0)
            let missing = try await run(["project", "delete", "alpha"] + database)
            #expect(missing.status == 1)
            #expect(missing.errors == "nearby-server: no project named 'alpha'\n")
            #expect(try await run(["project", "list"] + database).output.hasPrefix("beta\t"))
        }
    }

    /// Commands that read or change what a database holds leave none behind
    /// where there was none: they say where they looked and what to do.
    @Test func commandsOtherThanCreateMakeNoDatabase() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("none.sqlite").path
            for command in [["project", "list"], ["project", "devices", "alpha"], ["project", "admin-key", "alpha"],
                            ["beacon", "list", "--project", "alpha"], ["namespace", "list", "--project", "alpha"]] {
                let result = try await run(command + ["--database", path])
                #expect(result.status == 1, "\(command)")
                #expect(result.errors == "nearby-server: no database at \(path) (--database): `nearby-server serve` or `project create` "
                    + "makes it; to use another, give --database PATH or --config FILE\n", "\(command)")
                #expect(!FileManager.default.fileExists(atPath: path), "\(command) made \(path)")
            }
            // A configuration file's path is named as such.
            let config = directory.appendingPathComponent("server.conf").path
            try Data("[database]\npath = \"\(path)\"\n".utf8).write(to: URL(fileURLWithPath: config))
            let listed = try await run(["project", "list", "--config", config])
            #expect(listed.errors.contains("no database at \(path) ([database] path)"), "\(listed.errors)")
            #expect(try await run(["project", "create", "alpha", "--database", path]).status == 0)
            #expect(try await run(["project", "list", "--database", path]).output.hasPrefix("alpha\t"))
        }
    }

    @Test func configurationErrorsAreOneLine() async throws {
        try await withTemporaryDirectory { directory in
            let missing = try await run(["serve", "--config", directory.appendingPathComponent("none.conf").path])
            #expect(missing.status == 1)
            #expect(missing.errors.hasSuffix("none.conf: no such file\n"))

            let path = directory.appendingPathComponent("bad.conf").path
            try Data("[http]\nlisten = \"127.0.0.1:1\"\ncolour = \"blue\"\n".utf8).write(to: URL(fileURLWithPath: path))
            let bad = try await run(["serve", "--config", path])
            #expect(bad.status == 1)
            #expect(bad.errors == "nearby-server: \(path): unknown key 'colour' in [http]; known: listen, certificate, private-key, max-connections, "
                + "max-connections-per-address, max-websockets-per-project, header-timeout-seconds, idle-timeout-seconds, "
                + "request-timeout-seconds, "
                + "max-request-line-bytes, max-header-bytes, proxy-protocol-from\n")

            let limitPath = directory.appendingPathComponent("limit.conf").path
            try Data("[limits]\nmax-changes-per-batch = 100001\n".utf8).write(to: URL(fileURLWithPath: limitPath))
            let outOfRange = try await run(["serve", "--config", limitPath])
            #expect(outOfRange.status == 1)
            #expect(outOfRange.errors == "nearby-server: \(limitPath): [limits] max-changes-per-batch is 100001; it must be between 128 and 100000\n")
        }
    }

    /// Serves on a free port, says so in one line, and exits 0 on SIGTERM.
    @Test func serveAnnouncesItsPortAndStopsOnSIGTERM() async throws {
        try await withTemporaryDirectory { directory in
            let server = try await ChildProcess(
                name: "nearby-server", executable: try #require(executable).path,
                arguments: ["--listen", "127.0.0.1:0", "--database", directory.appendingPathComponent("db.sqlite").path,
                            "--log-level", "critical"])
            let line = try await server.waitForLine(containing: "listening on") + "\n"
            server.signal(SIGTERM)
            let exitStatus = try await server.waitForExit()
            let pattern = #/^nearby-server: listening on http://127\.0\.0\.1:(\d+)\n$/#
            let port = try #require(line.wholeMatch(of: pattern)).1
            #expect(Int(port).map { $0 > 0 } == true)
            #expect(exitStatus == 0)
        }
    }
}
