import ArgumentParser
import Foundation
import NearbyMessages
import Synchronization

struct Beacons: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the beacons in range and their attachments, live.",
        discussion: """
            Two subscriptions of DeviceTypes 'ble-beacon' under one manager: a raw one,
            which reports every Eddystone-UID, Eddystone-EID and iBeacon heard (no server
            needed), and, unless --raw-only, one for the attachments the project's
            registered beacons carry (from nearby-server).

            Each event is one line:
              in-range KIND ID rssi=DBM distance=Mm       a beacon was heard
              signal   KIND ID rssi=DBM distance=Mm       its signal or distance moved
              gone     KIND ID                            not heard for the lost timeout
              attached ID NAMESPACE/TYPE CONTENT          an attachment was found
              detached ID NAMESPACE/TYPE CONTENT          ... and lost
            KIND is eddystone-uid, eddystone-eid or ibeacon; ID the advertised id in \
            hex; CONTENT as text when it is UTF-8, else base64. With --json, one \
            object per line: {"event", "kind", "id", "rssi", "distance"} or \
            {"event", "id", "namespace", "type", "content" (base64), "text"}.
            """
    )

    @OptionGroup var bus: BusOptions
    @OptionGroup var manager: ManagerOptions

    @Flag(help: "Only the beacons heard; no attachments (no server needed).")
    var rawOnly = false

    @Flag(name: .customLong("no-ibeacons"), help: "Ignore iBeacons.")
    var noIBeacons = false

    @Flag(help: "Scan with low power (passive; beacons show up and go later).")
    var lowPower = false

    @Option(name: .long, help: "Attachments of this namespace (default: the project's).")
    var namespace = ""

    @Option(name: .long, help: "Only attachments of this type.")
    var type = ""

    @Option(name: .long, help: ArgumentHelp("Exit after printing this many events.", valueName: "n"))
    var count: Int?

    func run() async throws {
        let output = Output(json: bus.json)
        try await reportingFailures(output) {
            let messages = try await manager.open(on: bus)
            let limit = EventLimit(count)
            let emit: @Sendable ([String: any Sendable], TerminalText) -> Void = { fields, human in
                output.event(fields, human: human)
                limit.count()
            }
            let strategy = BeaconStrategy(includeIBeacons: !noIBeacons, lowPowerPreferred: lowPower)
            var rawStrategy = strategy
            rawStrategy.raw = true
            // The last RSSI and distance of each beacon: a signal event changes one of them.
            let signals = Mutex<[Data: (rssi: Int, distance: Double)]>([:])
            let sighting: @Sendable (String, Message, Int?, Double?) -> Void = { event, message, rssi, distance in
                let now = signals.withLock { table in
                    let last = table[message.content] ?? (0, 0)
                    table[message.content] = (rssi ?? last.rssi, distance ?? last.distance)
                    return table[message.content]!
                }
                let (kind, id) = Self.beacon(of: message)
                emit(["event": event, "kind": kind, "id": id, "rssi": now.rssi, "distance": now.distance],
                     "\(event.padding(toLength: 8, withPad: " ", startingAt: 0)) \(kind) \(id) rssi=\(now.rssi) distance=\(String(format: "%.1f", now.distance))m")
            }
            let raw = try await messages.subscription(
                deviceTypes: .bleBeacon, beaconStrategy: rawStrategy,
                messageFound: { sighting("in-range", $0, $1.rssi, $1.distanceMeters) },
                messageLost: { message, _ in
                    signals.withLock { _ = $0.removeValue(forKey: message.content) }
                    let (kind, id) = Self.beacon(of: message)
                    emit(["event": "gone", "kind": kind, "id": id], "gone     \(kind) \(id)")
                },
                distanceChanged: { message, meters, _ in sighting("signal", message, nil, meters) },
                bleSignalChanged: { message, rssi, _ in sighting("signal", message, rssi, nil) })
            var attachments: Subscription?
            if !rawOnly {
                let attachment: @Sendable (String, Message, MessageInfo) -> Void = { event, message, info in
                    let text = String(data: message.content, encoding: .utf8)
                    let id = info.beacon?.id ?? ""
                    var fields: [String: any Sendable] = ["event": event, "id": id, "namespace": message.namespace,
                                                          "type": message.type, "content": message.content.base64EncodedString()]
                    if let text { fields["text"] = text }
                    let shown: TerminalText = text.map { "'\($0)'" } ?? "base64:\(message.content.base64EncodedString())"
                    emit(fields, "\(event) \(id) \(message.namespace)/\(message.type) \(shown)")
                }
                attachments = try await messages.subscription(
                    namespace: namespace, type: type, deviceTypes: .bleBeacon, beaconStrategy: strategy,
                    messageFound: { attachment("attached", $0, $1) }, messageLost: { attachment("detached", $0, $1) })
            }
            output.event(["event": "watching", "path": raw.path.rawValue], human: "watching for beacons")
            await untilInterrupted(or: limit.ended)
            withExtendedLifetime((raw, attachments)) {}
        }
    }

    /// The kind and hex id of the beacon a raw sighting is: its type stands
    /// for the kind, its content is the id.
    static func beacon(of message: Message) -> (kind: String, id: String) {
        let kind = switch message.type {
        case "__i_beacon_id": "ibeacon"
        case "__eddystone_eid": "eddystone-eid"
        default: "eddystone-uid"
        }
        return (kind, message.content.map { String(format: "%02x", $0) }.joined())
    }
}
