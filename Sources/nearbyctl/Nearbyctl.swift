import ArgumentParser
import Foundation
import NearbyMessages
import Synchronization
import UnixSignals

@main
struct Nearbyctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearbyctl",
        abstract: "Publish and subscribe to Nearby Messages from the command line.",
        discussion: """
            nearbyctl talks to nearbyd over D-Bus (org.nearbyd) through the
            NearbyMessages library, as any app would. 'publish' and 'subscribe' keep
            their publication or subscription alive until interrupted (Ctrl-C,
            SIGTERM), until its TTL runs out, or, for 'subscribe --count N', until N
            events have been printed. 'upstream' sends messages to the project's
            application server and receives its messages. 'permission' shows and
            changes which apps may use Nearby; 'agent' asks you, on the terminal,
            when an app wants to use it for the first time.

            Human-readable output by default; --json prints one JSON object per line,
            for scripts. In human-readable output (and on standard error), text that
            comes from elsewhere (message contents and types, namespaces, app ids and
            their reasons, upstream data, the daemon's error messages) is shown with
            the characters a terminal would act on escaped: ESC as \\e; newline,
            carriage return and tab as \\n, \\r, \\t; the other control characters
            (C0, DEL, C1) as \\xNN; bidirectional overrides and isolates and line and
            paragraph separators as \\u{NNNN} (only an app's reasons, when 'agent'
            asks about it, keep their line breaks, indented). JSON values are exact
            (JSON escapes control characters itself).

            EXAMPLES
              nearbyctl publish --api-key KEY --type chat 'hello'
              nearbyctl subscribe --api-key KEY --type chat
              nearbyctl upstream send --api-key KEY --to shop@nearby.example item=42
              nearbyctl subscribe --api-key KEY --notify --background
              nearbyctl permission revoke org.example.Chat
              nearbyctl agent
              nearbyctl status --session --json

            ENVIRONMENT
              NEARBY_API_KEY   the API key when --api-key is not given

            EXIT STATUS
              0 on success or interruption; 1 when nearbyd refuses the request or
              cannot be reached, or nearby-server refuses the API key (the message
              says which).
            """,
        subcommands: [Publish.self, Subscribe.self, Beacons.self, Upstream.self, Permission.self, Agent.self, Status.self]
    )
}

/// Options every command takes: which bus, and the output format.
struct BusOptions: ParsableArguments {
    @Flag(name: .long, help: "Use the system bus (the default).")
    var system = false

    @Flag(name: .long, help: "Use the session bus.")
    var session = false

    @Option(name: .long, help: ArgumentHelp("Use the bus at this D-Bus address.", valueName: "address"))
    var bus: String?

    @Flag(name: .long, help: "Print one JSON object per line.")
    var json = false

    func validate() throws {
        guard [system, session, bus != nil].filter({ $0 }).count <= 1 else {
            throw ValidationError("choose one of --system, --session and --bus")
        }
    }

    var address: BusAddress {
        if let bus { return .address(bus) }
        return session ? .session : .system
    }
}

/// Options of the commands that make a manager.
struct ManagerOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The project's API key (default: $NEARBY_API_KEY).", valueName: "key"))
    var apiKey: String?

    @Option(name: .long, help: ArgumentHelp("The app id permission decisions are kept under.", valueName: "id"))
    var appId: String?

    @Option(name: .long, help: ArgumentHelp("Why the app uses the microphone, shown when the user is asked.", valueName: "text"))
    var microphoneUsage: String?

    @Option(name: .long, help: ArgumentHelp("Why the app uses Bluetooth, shown when the user is asked.", valueName: "text"))
    var bluetoothUsage: String?

    var usageDescriptions: UsageDescriptions {
        UsageDescriptions(microphone: microphoneUsage, bluetooth: bluetoothUsage)
    }

    /// A manager with these options on the bus `bus` names; `backgroundChanged`
    /// hears when it goes to the background and back, and `keyRefused` runs
    /// once nearby-server refuses its API key (at once, when nearbyd already
    /// knows the key is refused).
    func open(on bus: BusOptions, backgroundChanged: @escaping @Sendable (Bool) -> Void = { _ in },
              keyRefused: @escaping @Sendable () -> Void = {}) async throws -> MessageManager {
        let manager = try await MessageManager(apiKey: try key(), appId: appId, usageDescriptions: usageDescriptions,
                                               bus: bus.address, errorStateChanged: { if $0.apiKey { keyRefused() } },
                                               backgroundChanged: backgroundChanged)
        if try await manager.errorState.apiKey { keyRefused() }
        return manager
    }

    func key() throws -> String {
        if let apiKey { return apiKey }
        if let key = ProcessInfo.processInfo.environment["NEARBY_API_KEY"], !key.isEmpty { return key }
        throw ValidationError("give --api-key or set NEARBY_API_KEY")
    }
}

/// Options that make a Strategy.
struct StrategyOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("A medium to use: ble or audio (repeatable; default: all the daemon has).", valueName: "medium"))
    var medium: [String] = []

    @Option(name: .long, help: ArgumentHelp("broadcast, scan or both (default both).", valueName: "mode"))
    var mode: String?

    @Option(name: .long, help: ArgumentHelp("Lifetime in seconds (default 300; 0 = until ended, subscriptions only).", valueName: "seconds"))
    var ttl: UInt32?

    func strategy() throws -> Strategy? {
        guard !medium.isEmpty || mode != nil || ttl != nil else { return nil }
        var strategy = Strategy(mediums: medium.isEmpty ? nil : medium, ttlSeconds: ttl)
        if let mode {
            guard let parsed = Strategy.Mode(rawValue: mode) else { throw ValidationError("--mode must be broadcast, scan or both") }
            strategy.mode = parsed
        }
        return strategy
    }
}

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish a message until interrupted or expired.",
        discussion: """
            The content is the CONTENT argument as UTF-8 text, or the bytes of \
            --file (- for standard input).

            If the publication is still not active two seconds after it was made, a \
            line 'waiting (STATUS): REASON' says why (the server cannot be reached, \
            no medium works now, no permission...), again at each new reason, and \
            'active' once it no longer waits; with --json {"event": "waiting", \
            "status", "reason"} and {"event": "active"}. An API key nearby-server \
            refuses ends the command: the reason on standard error, exit status 1.

            With --ttl it ends by itself when the publication expires: 'expired', \
            then 'ended', and exit status 0 ({"event": "expired"}, {"event": "ended"}).
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var manager: ManagerOptions
    @OptionGroup var strategy: StrategyOptions

    @Option(name: .long, help: "The message type (at most 32 characters, no '*').")
    var type = ""

    @Option(name: .long, help: "The namespace (default: the project's).")
    var namespace = ""

    @Option(name: .long, help: ArgumentHelp("Publish this file's bytes instead of CONTENT.", valueName: "path"))
    var file: String?

    @Argument(help: "The content, as text.")
    var content: String?

    func validate() throws {
        guard (content == nil) != (file == nil) else { throw ValidationError("give CONTENT or --file, not both or neither") }
    }

    func run() async throws {
        let output = Output(json: bus.json)
        try await reportingFailures(output) {
            let bytes = try readContent()
            let (expired, expire) = AsyncStream.makeStream(of: Void.self)
            let refused = KeyRefusal()
            let messages = try await manager.open(on: bus, keyRefused: { refused.happened(); expire.finish() })
            let waits = WaitReporter(output: output)
            let publication = try await messages.publication(
                of: Message(content: bytes, namespace: namespace, type: type), strategy: try strategy.strategy(),
                expired: {
                    output.event(["event": "expired"], human: "expired")
                    expire.finish()
                },
                statusChanged: waits.statusChanged, statusReasonChanged: waits.reasonChanged)
            output.event(["event": "published", "path": publication.path.rawValue],
                         human: "published \(publication.path)")
            waits.begin(status: try await publication.status, reason: try await publication.statusReason)
            await untilInterrupted(or: expired)
            try await refused.fail(output, reason: try? await publication.statusReason)
            output.event(["event": "ended"], human: "ended")
            withExtendedLifetime(publication) {}
        }
    }

    /// CONTENT, or the file's bytes; a file that cannot be read is named with why.
    private func readContent() throws -> Data {
        guard let file else { return Data((content ?? "").utf8) }
        if file == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        let descriptor = open(file, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw InputError(message: "cannot read \(file): \(String(cString: strerror(errno)))") }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            return try handle.readToEnd() ?? Data()
        } catch {
            let reason = ((error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError).map { String(cString: strerror(Int32($0.code))) }
            throw InputError(message: "cannot read \(file): \(reason ?? "\(error)")")
        }
    }
}

struct Subscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Subscribe and print messages as they are found and lost.",
        discussion: """
            Each event is one line: 'found' or 'lost', the namespace and type, the \
            medium, for 'found' how it was heard (rssi=N dBm over BLE, level=N dBFS \
            over audio, and the estimated distance) and the content (as text when \
            it is UTF-8, else base64). A lost message gives no reading: it was not \
            heard for a while. With --json: {"event", "namespace", "type", "content" \
            (base64), "text" (when UTF-8), "medium", and for 'found' "rssi" (over \
            audio the level in dBFS) and "distance"}.

            'waiting' and 'active' lines say why the subscription waits, and a \
            refused API key ends the command, as for publish. 'background' and \
            'foreground' lines ({"event": ...}) say when the manager goes to the \
            background (--background, or nearbyd saw your login session become \
            inactive or locked) and back. With --ttl it ends by \
            itself when the subscription expires: 'expired' ({"event": "expired"}), \
            and exit status 0.

            In the background only subscriptions allowed there keep running, on BLE
            alone. --notify makes the subscription one of them and posts a desktop
            notification (org.freedesktop.Notifications on the session bus, the one of
            DBUS_SESSION_BUS_ADDRESS, whichever bus nearbyd is on) for each message
            found while in the background: summary 'Nearby message', body the type and
            the content. Without a notification daemon it warns once and goes on
            printing messages.

            EXAMPLES
              nearbyctl subscribe --api-key KEY --type chat
              nearbyctl subscribe --api-key KEY --type chat --notify --background
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var manager: ManagerOptions
    @OptionGroup var strategy: StrategyOptions

    @Option(name: .long, help: "Only this type (default: every type of the namespace).")
    var type = ""

    @Option(name: .long, help: "The namespace (default: the project's).")
    var namespace = ""

    @Option(name: .long, help: ArgumentHelp("Exit after printing this many found/lost events.", valueName: "n"))
    var count: Int?

    @Flag(help: "Keep running in the background and post a desktop notification for each message found there.")
    var notify = false

    @Flag(help: "Start in the background, where only subscriptions allowed there run (see --notify).")
    var background = false

    func run() async throws {
        let output = Output(json: bus.json)
        try await reportingFailures(output) {
            let inBackground = Mutex(false)
            let backgroundChanged: @Sendable (Bool) -> Void = { now in
                guard inBackground.withLock({ before in
                    defer { before = now }
                    return before != now
                }) else { return }
                output.event(["event": now ? "background" : "foreground"], human: now ? "background" : "foreground")
            }
            let limit = EventLimit(count)
            let refused = KeyRefusal()
            let messages = try await manager.open(on: bus, backgroundChanged: backgroundChanged,
                                                  keyRefused: { refused.happened(); limit.end() })
            if background { try await messages.setBackground(true) }
            // Changes come to backgroundChanged from the start; this is where the manager started.
            backgroundChanged(try await messages.background)
            let notifier = notify ? await DesktopNotifier(output: output) : nil
            var strategy = try strategy.strategy()
            if notify {
                strategy = strategy ?? Strategy()
                strategy?.allowInBackground = true
            }
            let report: @Sendable (String, Message, MessageInfo) -> Void = { event, message, info in
                output.message(event, message, info)
                limit.count()
            }
            let found: @Sendable (Message, MessageInfo) -> Void = { message, info in
                report("found", message, info)
                if let notifier, inBackground.withLock({ $0 }) { notifier.post(message) }
            }
            let waits = WaitReporter(output: output)
            let subscription = try await messages.subscription(
                namespace: namespace, type: type, strategy: strategy,
                messageFound: found, messageLost: { report("lost", $0, $1) },
                expired: {
                    output.event(["event": "expired"], human: "expired")
                    limit.end()
                },
                statusChanged: waits.statusChanged, statusReasonChanged: waits.reasonChanged)
            output.event(["event": "subscribed", "path": subscription.path.rawValue], human: "subscribed \(subscription.path)")
            waits.begin(status: try await subscription.status, reason: try await subscription.statusReason)
            await untilInterrupted(or: limit.ended)
            try await refused.fail(output, reason: try? await subscription.statusReason)
            withExtendedLifetime(subscription) {}
        }
    }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the daemon's version, the mediums it can use now, nearby-server's state, and its login sessions and static publications.",
        discussion: """
            'server' is 'connected: URL' while nearbyd is in step with nearby-server
            at URL (one of its [server] url), 'unreachable: WHY' after an attempt
            that could not reach it (WHY says what failed, such as a TLS certificate
            nearbyd does not trust; with several URLs, what failed at each),
            'connecting' before any attempt has ended, or 'idle' while no app uses it.
            'login sessions' is 'logind' when nearbyd follows its clients' login
            sessions (a manager is in the background while its session is inactive or
            locked), or 'unavailable: WHY' (then only apps set Background). Each static
            publication file of /etc/nearbyd/publications.d is listed with its status
            (starting, active) and object, or 'error' and why it was skipped.
            """
    )

    @OptionGroup var bus: BusOptions

    func run() async throws {
        let output = Output(json: bus.json)
        try await reportingFailures(output) {
            let status = try await DaemonStatus.read(from: bus.address)
            let statics = status.staticPublications.map { ["file": $0.file, "status": $0.status, "detail": $0.detail] }
            var human: TerminalText = """
                version:             \(status.version)
                available mediums:   \(status.availableMediums.isEmpty ? "none" : status.availableMediums.joined(separator: ", "))
                debug logging:       \(status.debugLogging ? "on" : "off")
                server:              \(status.server)
                login sessions:      \(status.loginSessions)
                static publications: \(statics.isEmpty ? "none" : "")
                """
            for entry in status.staticPublications { human += "\n  \(entry.file): \(entry.status) \(entry.detail)" }
            output.event(["version": status.version, "availableMediums": status.availableMediums,
                          "debugLogging": status.debugLogging, "server": status.server, "loginSessions": status.loginSessions,
                          "staticPublications": statics],
                         human: human)
        }
    }
}

/// Whether nearby-server refused the manager's API key: the command then
/// fails, saying so, instead of waiting for a key that will not work.
final class KeyRefusal: Sendable {
    private let refused = Mutex(false)

    func happened() { refused.withLock { $0 = true } }

    /// Fails the command (exit status 1) if the key was refused; `reason` is the object's StatusReason.
    func fail(_ output: Output, reason: String?) async throws {
        guard refused.withLock({ $0 }) else { return }
        let why = reason.flatMap { $0.isEmpty ? nil : $0 } ?? Self.daemonsWording
        output.failure("\(why) (\(Self.hint))")
        throw ExitCode.failure
    }

    /// How nearbyd's reasons begin when nearby-server refuses the key (doc/dbus-api.md, Errors).
    static let daemonsWording = "nearby-server refuses the API key"
    static let hint = "check --api-key or NEARBY_API_KEY: `nearby-server project create` printed the project's key"
}

/// Waits for SIGINT or SIGTERM, or for `events` to end.
func untilInterrupted(or events: AsyncStream<Void>) async {
    let signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
    await withTaskGroup(of: Void.self) { group in
        group.addTask { for await _ in signals { return } }
        group.addTask { for await _ in events {} }
        await group.next()
        group.cancelAll()
    }
}

/// Prints a failure as one line on stderr and exits 1.
func reportingFailures(_ output: Output, _ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as NearbyMessagesError {
        let message = error.message.replacingOccurrences(of: "\n", with: " ")
        switch error.kind {
        case .daemonUnavailable: output.failure("nearbyd is not reachable: \(message)")
        case .accessDenied: output.failure("access denied: \(message)")
        case .notPermitted where message.hasPrefix(KeyRefusal.daemonsWording):
            // nearbyd leads with the key when the server refuses it: the first thing to fix.
            output.failure("\(message) (\(KeyRefusal.hint))")
        case .notPermitted: output.failure("not permitted: \(message)")
        default: output.failure("\(message)")
        }
        throw ExitCode.failure
    } catch let error as InputError {
        output.failure("\(error.message)")
        throw ExitCode.failure
    }
}

/// An input the command could not read (a file), said in one line on stderr, exit status 1.
struct InputError: Error {
    let message: String
}
