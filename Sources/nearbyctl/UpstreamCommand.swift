import ArgumentParser
import Foundation
import NearbyMessages

struct Upstream: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send messages to the app's application server and receive its messages.",
        discussion: """
            Upstream messages travel over the direct channel of the API key to
            nearby-server, which hands them to the project's application server;
            nearbyd keeps them (across restarts) until the server says they were
            delivered or failed.
            """,
        subcommands: [UpstreamSend.self, UpstreamListen.self]
    )
}

struct UpstreamSend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send one upstream message and wait for its verdict.",
        discussion: """
            The data is KEY=VALUE arguments. The command asks for the direct channel \
            while it waits (with --ttl 0 it first waits up to 10 s for the channel to \
            open, since a message that is now or never fails without it), and prints \
            'succeeded ID' or 'failed ID ERROR: DESCRIPTION' (with --json: {"event": \
            "succeeded"|"failed", "id", "error", "description"}). Verdicts kept for \
            the app from an earlier run are printed as they come too.

            EXAMPLES
              nearbyctl upstream send --api-key KEY --to shop@nearby.example \\
                --id order-1 item=42
              nearbyctl upstream send --api-key KEY --to shop@nearby.example \\
                --ttl 0 ping=1

            EXIT STATUS
              0 when the message was delivered; 1 when it failed or nearbyd refused it.
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var manager: ManagerOptions

    @Option(name: .long, help: ArgumentHelp("The application server: SENDER_ID@DOMAIN.", valueName: "address"))
    var to: String

    @Option(name: .long, help: ArgumentHelp("The message id (default: a new UUID).", valueName: "id"))
    var id: String?

    @Option(name: .long, help: ArgumentHelp("Seconds it may wait for delivery (0 = now or never).", valueName: "seconds"))
    var ttl: Int64 = 60

    @Argument(help: ArgumentHelp("The data, as KEY=VALUE.", valueName: "key=value"))
    var data: [String] = []

    func validate() throws {
        _ = try payload()
    }

    func run() async throws {
        let output = Output(json: bus.json)
        let data = try payload()
        let id = self.id ?? UUID().uuidString
        let (verdicts, verdict) = AsyncStream.makeStream(of: Result<String, UpstreamFailure>.self)
        let (connections, connection) = AsyncStream.makeStream(of: Bool.self)
        try await reportingFailures(output) {
            let handlers = UpstreamHandlers(sendSucceeded: { verdict.yield(.success($0)) },
                                            sendFailed: { verdict.yield(.failure($0)) },
                                            directChannelConnectedChanged: { connection.yield($0) })
            let messages = try await MessageManager(apiKey: try manager.key(), appId: manager.appId, bus: bus.address,
                                                    upstream: handlers)
            try await messages.setDirectChannel(true)
            if ttl == 0, !(try await messages.directChannelConnected) {
                await firstConnection(connections, within: .seconds(10))
            }
            try await messages.sendUpstream(data: data, to: to, messageID: id, ttlSeconds: ttl)
            for await result in verdicts {
                switch result {
                case .success(let messageID):
                    output.event(["event": "succeeded", "id": messageID], human: "succeeded \(messageID)")
                    if messageID == id { return }
                case .failure(let failure):
                    output.event(["event": "failed", "id": failure.messageID, "error": failure.error,
                                  "description": failure.description],
                                 human: "failed \(failure.messageID) \(failure.error): \(failure.description)")
                    if failure.messageID == id { throw ExitCode.failure }
                }
            }
            withExtendedLifetime(messages) {}
        }
    }

    /// Waits until the channel opens, or `limit` has passed.
    private func firstConnection(_ connections: AsyncStream<Bool>, within limit: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { for await connected in connections where connected { return } }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    private func payload() throws -> [String: String] {
        var result: [String: String] = [:]
        for pair in data {
            guard let equals = pair.firstIndex(of: "=") else { throw ValidationError("data '\(pair)' is not KEY=VALUE") }
            result[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
        return result
    }
}

struct UpstreamListen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Open the direct channel and print downstream messages until interrupted.",
        discussion: """
            Each event is one line: 'connected' or 'disconnected' as the direct channel
            opens and closes, and 'message ID from SENDER KEY=VALUE ...' for each message
            of an application server (with --json: {"event": "message", "id", "from",
            "data"}). Messages come at least once: after a reconnect the same id may be
            printed again.
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var manager: ManagerOptions

    @Option(name: .long, help: ArgumentHelp("Exit after printing this many messages.", valueName: "n"))
    var count: Int?

    func run() async throws {
        let output = Output(json: bus.json)
        try await reportingFailures(output) {
            let limit = EventLimit(count)
            let handlers = UpstreamHandlers(
                messageReceived: { message in
                    let pairs: [TerminalText] = message.data.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    output.event(["event": "message", "id": message.messageID, "from": message.from, "data": message.data],
                                 human: (["message \(message.messageID) from \(message.from)"] + pairs).joined(separator: " "))
                    limit.count()
                },
                directChannelConnectedChanged: { connected in
                    let event = connected ? "connected" : "disconnected"
                    output.event(["event": event], human: "\(event)")
                })
            let messages = try await MessageManager(apiKey: try manager.key(), appId: manager.appId, bus: bus.address,
                                                    upstream: handlers)
            try await messages.setDirectChannel(true)
            if try await messages.directChannelConnected { output.event(["event": "connected"], human: "connected") }
            await untilInterrupted(or: limit.ended)
            withExtendedLifetime(messages) {}
        }
    }
}
