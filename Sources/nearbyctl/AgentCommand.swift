import ArgumentParser
import Foundation
import NearbyMessages

struct Agent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Answer nearbyd's permission requests on the terminal (a permission agent).",
        discussion: """
            Registers a permission agent with nearbyd: when an app of your login
            session (without logind: of your user) publishes or subscribes for the first
            time and you have not decided about it yet, nearbyd asks the agent. For each
            request nearbyctl prints the app id, the user, the process, the mediums it
            wants and the reasons the app gave for using the microphone and Bluetooth,
            then asks

              Allow APP to use Nearby (MEDIUMS)? [y/N]

            'y' or 'yes' grants; anything else, or the end of input, denies. The answer
            is kept as your decision for the app ('nearbyctl permission' shows and
            changes it). Requests are answered one at a time, in the order they came.
            nearbyd waits a limited time: a request you answer after that was already
            taken as a deny for that one call, and your late answer is not kept.

            With --answer, every request is answered without asking, for kiosks and
            tests. Each answered request is one line:
              ANSWER APP_ID user=UID pid=PID mediums=M1,M2 bluetooth="..."
                microphone="..."
            (pid, bluetooth and microphone when known; ANSWER is granted or denied). With
            --json, one object per line instead: {"event": "granted"|"denied", "appId",
            "user", "processId", "client", "mediums", "bluetoothUsageDescription",
            "microphoneUsageDescription"}; when asking, the question then goes to
            standard error.

            The agent runs until interrupted (Ctrl-C, SIGTERM) or, with --count N,
            until it has answered N requests, then unregisters. It registers again by
            itself when nearbyd restarts, and says so ({"event": "registered"} with
            --json, as when it starts).

            EXAMPLES
              nearbyctl agent
              nearbyctl agent --answer grant --json

            EXIT STATUS
              0 on interruption or after --count requests; 1 when nearbyd refuses the
              agent or cannot be reached.
            """
    )

    enum Answer: String, ExpressibleByArgument, CaseIterable {
        case grant, deny
    }

    @OptionGroup var bus: BusOptions

    @Option(name: .long, help: ArgumentHelp("Answer every request without asking.", valueName: "grant|deny"))
    var answer: Answer?

    @Option(name: .long, help: ArgumentHelp("Exit after answering this many requests.", valueName: "n"))
    var count: Int?

    func run() async throws {
        let output = Output(json: bus.json)
        let fixed = answer
        try await reportingFailures(output) {
            let limit = EventLimit(count)
            let registeredAgain: @Sendable () -> Void = {
                output.event(["event": "registered"], human: "nearbyd restarted; permission agent registered again")
            }
            let agent = try await PermissionAgent(bus: bus.address, registeredAgain: registeredAgain) { request in
                let granted = if let fixed { fixed == .grant } else { await TerminalQuestion.ask(request, json: output.json) }
                output.answered(request, granted: granted)
                limit.count()
                return granted
            }
            output.event(["event": "registered", "path": agent.path.rawValue],
                         human: "permission agent registered at \(agent.path); waiting for requests")
            await untilInterrupted(or: limit.ended)
            // It fails only when nearbyd has gone or forgotten the agent: nothing is left registered then.
            try? await agent.unregister()
            output.event(["event": "unregistered"], human: "permission agent unregistered")
        }
    }
}

/// Asks the person at the terminal about one request.
enum TerminalQuestion {
    /// Shows the request and reads the answer; true for y or yes. The question
    /// goes to standard error when standard output carries JSON.
    static func ask(_ request: PermissionAgent.Request, json: Bool) async -> Bool {
        let mediums = request.mediums.joined(separator: ", ")
        var lines: [TerminalText] = ["nearbyd asks whether \(request.appId) may use Nearby:"]
        if let user = request.user { lines.append("  user:       \(user)\(userName(user).map { " (\($0))" } ?? "")") }
        if let pid = request.processId { lines.append("  process:    \(pid)") }
        lines.append("  mediums:    \(mediums)")
        if let reason = request.usageDescriptions.bluetooth { lines.append("  bluetooth:  \(indented(reason))") }
        if let reason = request.usageDescriptions.microphone { lines.append("  microphone: \(indented(reason))") }
        let terminal = json ? FileHandle.standardError : FileHandle.standardOutput
        let interactive = isatty(STDIN_FILENO) != 0
        // What was typed before the question is not an answer to it.
        if interactive { tcflush(STDIN_FILENO, TCIFLUSH) }
        let question = lines.joined(separator: "\n") + "\nAllow \(request.appId) to use Nearby (\(mediums))? [y/N] "
        terminal.write(Data(question.rendered.utf8))
        guard let reply = await readLine() else {
            terminal.write(Data("(end of input: denied)\n".utf8))
            return false
        }
        // A terminal echoes what was typed; an answer from a file or pipe is shown here.
        if !interactive { terminal.write(Data(("\(reply)\n" as TerminalText).rendered.utf8)) }
        return ["y", "yes"].contains(reply.trimmingCharacters(in: .whitespaces).lowercased())
    }

    /// A line of standard input, read on a thread of its own: a person may
    /// take minutes, and the concurrency pool must not wait with them.
    private static func readLine() async -> String? {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: Swift.readLine()) }.start()
        }
    }

    private static func userName(_ uid: UInt32) -> String? {
        getpwuid(uid).map { String(cString: $0.pointee.pw_name) }
    }

    /// A reason of several lines, its later lines under its first (each line
    /// escaped on its own, so the app's line breaks stay and nothing else does).
    private static func indented(_ text: String) -> TerminalText {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { "\($0)" as TerminalText }
            .joined(separator: "\n              ")
    }
}

extension Output {
    /// An answered request as one line.
    func answered(_ request: PermissionAgent.Request, granted: Bool) {
        let answer = granted ? "granted" : "denied"
        var fields: [String: any Sendable] = ["event": answer, "appId": request.appId, "mediums": request.mediums]
        var human: TerminalText = "\(answer) \(request.appId)"
        if let user = request.user {
            fields["user"] = user
            human += " user=\(user)"
        }
        if let pid = request.processId {
            fields["processId"] = pid
            human += " pid=\(pid)"
        }
        if let client = request.client { fields["client"] = client }
        human += " mediums=\(request.mediums.joined(separator: ","))"
        if let reason = request.usageDescriptions.bluetooth {
            fields["bluetoothUsageDescription"] = reason
            human += " bluetooth=\(Self.quoted(reason))"
        }
        if let reason = request.usageDescriptions.microphone {
            fields["microphoneUsageDescription"] = reason
            human += " microphone=\(Self.quoted(reason))"
        }
        event(fields, human: human)
    }

    /// Text in double quotes on one line: quotes and backslashes escaped,
    /// then control characters as everywhere (a newline as `\n`).
    static func quoted(_ text: String) -> TerminalText {
        "\"\(text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\""
    }
}
