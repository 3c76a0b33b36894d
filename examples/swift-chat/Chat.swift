// A small app on the Swift library (NearbyMessages), the twin of
// examples/chat.py: says who is here to the devices nearby, and prints who
// comes and goes.
//
//   chat-example NAME --api-key KEY [--bus ADDRESS]
//
// Publishes "NAME is here" as a `chat` message and subscribes to the
// others'; prints `here: TEXT (N.N m)` when one is found and `gone: TEXT`
// when it is lost, until Ctrl-C or SIGTERM. Without --bus it uses the
// system bus, where the installed nearbyd serves. Built with the package
// (`swift build --product chat-example`).

import DBus
import Foundation
import NearbyMessages
import UnixSignals

@main
enum Chat {
    static func main() async {
        guard let arguments = Arguments(CommandLine.arguments.dropFirst()) else {
            FileHandle.standardError.write(Data("usage: chat-example NAME --api-key KEY [--bus ADDRESS]\n".utf8))
            exit(64)
        }
        do {
            let manager = try await MessageManager(apiKey: arguments.apiKey, appId: "org.example.Chat",
                                                   bus: arguments.bus.map { .address($0) } ?? .system)
            let publication = try await manager.publication(of: Message(content: Data("\(arguments.name) is here".utf8), type: "chat"))
            let subscription = try await manager.subscription(
                type: "chat",
                messageFound: { message, info in
                    say("here: \(String(decoding: message.content, as: UTF8.self)) (\(String(format: "%.1f", info.distanceMeters)) m)")
                },
                messageLost: { message, _ in say("gone: \(String(decoding: message.content, as: UTF8.self))") })
            say("\(arguments.name): listening")
            for await _ in await UnixSignalsSequence(trapping: .sigint, .sigterm) { break }
            // The objects stay active while they live: until here.
            withExtendedLifetime((publication, subscription)) {}
            try await manager.release()
        } catch let error as NearbyMessagesError {
            say("chat: \(error.message) (\(error.kind))")
            exit(1)
        } catch {
            say("chat: \(error)")
            exit(1)
        }
    }
}

/// Writes a line to standard output at once, also into a pipe.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// NAME, --api-key KEY and --bus ADDRESS, in any order.
struct Arguments {
    var name: String
    var apiKey: String
    var bus: String?

    init?(_ words: ArraySlice<String>) {
        var name: String?, apiKey: String?, bus: String?
        var rest = words
        while let word = rest.popFirst() {
            switch word {
            case "--api-key": apiKey = rest.popFirst()
            case "--bus": bus = rest.popFirst()
            default:
                guard name == nil, !word.hasPrefix("-") else { return nil }
                name = word
            }
        }
        guard let name, let apiKey else { return nil }
        (self.name, self.apiKey, self.bus) = (name, apiKey, bus)
    }
}
