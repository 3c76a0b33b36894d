import ArgumentParser
import Foundation
import NIOPosix
import Synchronization

/// nearby-load: one process of the load generator of `nearby-bench server`.
///
/// Simulated devices that speak nearby-server's device API directly, as a
/// device's own Nearby stack would, on SwiftNIO: one event loop and kept-alive
/// HTTP/1.1 connections, so that the generator spends a small part of what
/// the server it measures spends per report.
///
/// Driven by the benchmark through JSON commands on standard input, one a
/// line, each answered on standard output with one line
/// `{"done": ID, "result": {...}}` (after `{"measuring": ID}` when its
/// measured window begins, so that the benchmark reads the processes' CPU over
/// the same window). `id` is echoed:
///
///     {"id": 1, "do": "setup"}                       register and prepare every device
///     {"id": 2, "do": "open", "within": S}           open every device's stream
///     {"id": 3, "do": "close"}                       close every stream
///     {"id": 4, "do": "held"}                        how many streams are open now
///     {"id": 5, "do": "run", "kind": "health"|"sightings", "warmup": W, "seconds": S,
///      "concurrency": C}                             closed loop: C requests in flight
///     {"id": 6, "do": "run", ..., "rate": R}         open loop: R requests a second, with latencies
///     {"id": 6, "do": "run", "kind": "health", "url": U, ...}   GET U/v1/health instead (a floor)
///     {"id": 7, "do": "urls", "urls": [...]}         the server(s) moved (restarted on other ports)
///     {"id": 8, "do": "channels", "count": N, "within": S}   open the first N moving devices' channels
///     {"id": 9, "do": "upstream-start", "in_flight": K, "warmup": W, "within": S}
///     {"id": 10, "do": "upstream-window", "seconds": S}
///     {"id": 11, "do": "upstream-stop", "within": S}
///     {"id": 12, "do": "close-channels"}
///     {"id": 13, "do": "quit"}
///
/// The devices: `--devices` moving devices each register (POST /v1/devices),
/// take a token, publish p0 (type "bench", broadcast, BLE; its content names
/// the device) and subscribe s0 (type "bench", scan), and open their stream.
/// Each sighting report moves a device: one of the `--neighbours` tokens it
/// hears is reported gone and another device's heard instead, so an edge ends
/// and one appears, and its stream gets `lost` and `found`. Neighbours are
/// devices of the same process. `--idle` devices only register and hold a
/// stream. Upstream: the first moving devices open their direct channel and
/// keep `in_flight` messages out to `--to`, sending the next as each one's
/// verdict comes.
///
/// Each device's stream and channel come from a source address of its own
/// group (127.W.x.y, `--per-address` devices an address); requests go from
/// 127.W.255.1 over kept-alive connections, at most 128 to each server.
/// Registrations go round robin over `--urls`; a device's later requests, its
/// stream and its channel go to the replica that serves it, which the others
/// redirect it to (307), as nearbyd does.
@main
struct NearbyLoad: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nearby-load",
        abstract: "One process of nearby-bench server's load generator, driven by JSON commands on standard input.")

    @Option(help: "The servers, comma-separated (http://HOST:PORT).")
    var urls: String
    @Option(help: "The project's API key.")
    var key: String
    @Option(help: "This process's number (its source addresses, its content).")
    var process = 0
    @Option(help: "Moving devices.")
    var devices = 500
    @Option(help: "Devices that only hold a stream.")
    var idle = 0
    @Option(help: "Tokens each moving device hears at once.")
    var neighbours = 4
    @Option(name: .customLong("per-address"), help: "Devices per source address (each with its stream, and its channel).")
    var perAddress = 100
    @Option(help: "The application server upstream messages go to (PROJECT@DOMAIN).")
    var to = ""
    @Option(name: .customLong("setup-concurrency"), help: "Registrations and connections under way at once.")
    var setupConcurrency = 16
    @Option(help: "The seed of the devices' choices (neighbours, moves).")
    var seed = 1

    func run() async throws {
        raiseDescriptorLimit()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let worker = LoadWorker(.init(urls: urls.split(separator: ",").map(String.init), key: key, process: process,
                                      devices: devices, idle: idle, neighbours: neighbours, perAddress: perAddress, to: to,
                                      setupConcurrency: setupConcurrency, seed: seed),
                                group: group, emit: Output.line)
        Output.line(#"{"ready": true}"#)
        for await line in Self.commands() {
            guard let command = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let action = command["do"] as? String else { continue }
            let id = command.int("id") ?? 0
            if action == "quit" {
                Output.line(#"{"done": \#(id), "result": {}}"#)
                break
            }
            let result = await worker.handle(action, command)
            let encoded = (try? JSONSerialization.data(withJSONObject: result, options: [.sortedKeys])) ?? Data("{}".utf8)
            Output.line(#"{"done": \#(id), "result": \#(String(decoding: encoded, as: UTF8.self))}"#)
        }
        try await group.shutdownGracefully()
    }

    /// Standard input's lines, read on a thread of their own, until it ends.
    private static func commands() -> AsyncStream<String> {
        AsyncStream { continuation in
            Thread.detachNewThread {
                while let line = readLine() { continuation.yield(line) }
                continuation.finish()
            }
        }
    }

    /// Every stream is a descriptor: as many as the hard limit allows.
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
    }
}

/// Standard output, one whole line at a time whichever task writes it.
enum Output {
    private static let lock = Mutex(())

    @Sendable static func line(_ text: String) {
        lock.withLock { _ in
            FileHandle.standardOutput.write(Data((text + "\n").utf8))
        }
    }
}
