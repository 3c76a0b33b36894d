import ArgumentParser
import Foundation
import NearbyMessages

struct Permission: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show, grant and revoke apps' permission to use Nearby.",
        discussion: """
            nearbyd keeps one decision per user and app id: granted, denied or
            undecided, with who decided (agent: the user through their session's
            permission agent; app: the user through the app's own dialog; user: set
            directly, as here or by the app's PermissionGranted; policy: nearbyd's
            default policy) and when. An app without a decision is asked about when it
            first publishes or subscribes.

            Each command works on the caller's own decisions; --user names another
            user, which only root may do.

            EXAMPLES
              nearbyctl permission show
              nearbyctl permission show org.example.Chat
              nearbyctl permission revoke org.example.Chat
              sudo nearbyctl permission grant org.example.Kiosk --user kiosk

            EXIT STATUS
              0 on success; 1 when nearbyd refuses (another user's decisions without
              being root) or cannot be reached.
            """,
        subcommands: [PermissionShow.self, PermissionGrant.self, PermissionRevoke.self]
    )
}

/// `--user`: a uid or a user name.
struct UserOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The user, by uid or name (default: yourself; another user: root only).",
                                            valueName: "user"),
            transform: UserOption.uid)
    var user: UInt32?

    static func uid(_ text: String) throws -> UInt32 {
        if let uid = UInt32(text) { return uid }
        guard let entry = getpwnam(text) else { throw ValidationError("no user '\(text)'") }
        return entry.pointee.pw_uid
    }
}

struct PermissionShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show the decision for an app, or every decision kept.",
        discussion: """
            One line per app:
              APP_ID (user UID): DECISION by SOURCE at TIME
            DECISION is granted, denied or undecided (then without 'by' and 'at'),
            SOURCE one of agent, app, user and policy, TIME in ISO 8601 (UTC).
            Without APP_ID, every app with a decision; root without --user sees every
            user's. With --json, one object per line: {"user", "appId", "decision",
            "decidedBy", "decidedAt"}, the last two only when decided.
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var user: UserOption

    @Argument(help: ArgumentHelp("The app id (default: every app).", valueName: "app-id"))
    var appId: String?

    func run() async throws {
        let output = Output(json: bus.json)
        try await reportingFailures(output) {
            let permissions = Permissions(bus: bus.address)
            if let appId {
                output.permission(try await permissions.permission(appId: appId, user: user.user))
                return
            }
            let all = try await permissions.permissions(user: user.user)
            if all.isEmpty, !bus.json { output.event([:], human: "no decisions kept") }
            for entry in all.sorted(by: { ($0.user, $0.appId) < ($1.user, $1.appId) }) { output.permission(entry) }
        }
    }
}

struct PermissionGrant: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "grant",
        abstract: "Allow an app to use Nearby.",
        discussion: """
            Kept as the user's decision; the app's paused publications and
            subscriptions resume. Prints the decision as 'show' does.
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var user: UserOption

    @Argument(help: ArgumentHelp("The app id.", valueName: "app-id"))
    var appId: String

    func run() async throws {
        try await setPermission(appId, granted: true, user: user.user, bus: bus)
    }
}

struct PermissionRevoke: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Deny an app the use of Nearby.",
        discussion: """
            Kept as the user's decision; the app's publications and subscriptions
            stop (status inactive) and its new ones fail until it is granted again.
            Prints the decision as 'show' does.
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var user: UserOption

    @Argument(help: ArgumentHelp("The app id.", valueName: "app-id"))
    var appId: String

    func run() async throws {
        try await setPermission(appId, granted: false, user: user.user, bus: bus)
    }
}

/// Sets the decision and prints it as nearbyd now keeps it.
private func setPermission(_ appId: String, granted: Bool, user: UInt32?, bus: BusOptions) async throws {
    let output = Output(json: bus.json)
    try await reportingFailures(output) {
        let permissions = Permissions(bus: bus.address)
        try await permissions.setPermission(appId: appId, granted: granted, user: user)
        output.permission(try await permissions.permission(appId: appId, user: user))
    }
}

extension Output {
    /// One app's decision as a line.
    func permission(_ entry: AppPermission) {
        var fields: [String: any Sendable] = ["user": entry.user, "appId": entry.appId, "decision": entry.decision.rawValue]
        var human: TerminalText = "\(entry.appId) (user \(entry.user)): \(entry.decision.rawValue)"
        if let source = entry.decidedBy {
            fields["decidedBy"] = source.rawValue
            human += " by \(source)"
        }
        if let date = entry.decidedAt {
            let time = date.formatted(.iso8601)
            fields["decidedAt"] = time
            human += " at \(time)"
        }
        event(fields, human: human)
    }
}
