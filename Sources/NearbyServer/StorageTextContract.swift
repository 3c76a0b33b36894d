import Foundation
import NearbyCore
import ServerAPI

/// What nearby-server promises about text from outside on its way to storage,
/// on both engines: checked by the storage-fuzz harness (Sources/StorageFuzz),
/// which reaches it through this SPI with an SQLite file and a database of a
/// throwaway PostgreSQL cluster.
///
/// Each input is a few texts (a beacon's description, a property, its place
/// and floor, an attachment's namespaced type, a `q`, a `namespacedType`
/// filter, a message type) put through the same calls the HTTP API makes
/// (``BeaconRegistry``, ``Validation``, ``ServerStorage/applyChanges(_:device:limits:)``)
/// on each engine in turn. The promises:
///
/// - each call is answered or refused alike by both engines: the same JSON,
///   or the same ``APIError``; an engine's own error (what a client would
///   meet as a 500, as PostgreSQL's 22021 for a NUL was) is never one;
/// - nothing answered holds a character ``TextRule`` refuses, so nothing it
///   refuses was stored;
/// - what was taken reads back as it was sent.
@_spi(Testing) public struct StorageTextContract: Sendable {
    private let engines: [(name: String, storage: any ServerStorage)]
    private static let clock = FixedClock()
    private static let project = ProjectRecord(name: "fuzz", namespace: "fuzz", createdAtMs: FixedClock.nowMs)
    private static let device = DeviceRecord(id: "fuzzdevice", project: "fuzz", namespace: "fuzz", createdAtMs: FixedClock.nowMs)
    private static let objectLimits = ObjectLimits(publications: 4, subscriptions: 4)

    /// The engines, each empty and migrated: the project `fuzz` and its
    /// device are created in each (its namespace, `fuzz`, is the one an
    /// input's namespaced types can name).
    public init(sqlite: any ServerStorage, postgres: any ServerStorage) async throws {
        engines = [("SQLite", sqlite), ("PostgreSQL", postgres)]
        for (_, storage) in engines {
            try await storage.createProject(Self.project, apiKeyHash: Data(repeating: 1, count: 32),
                                            adminKeyHash: Data(repeating: 2, count: 32), serverKeyHash: Data(repeating: 3, count: 32))
            guard try await storage.createDevice(Self.device, secretHash: Data(repeating: 4, count: 32), limit: 1) else {
                throw StorageContractBroken("the device could not be created")
            }
        }
    }

    /// How many texts an input holds: its bytes split at each 0xFF (a byte
    /// UTF-8 never holds), each part read as UTF-8 (what is not becomes
    /// U+FFFD, as a JSON decoder would refuse it).
    static let fieldCount = 8

    /// Puts `input` through every engine; traps, naming the broken promise,
    /// when one is. `sequence` numbers the input (its beacon's id), so that
    /// each input registers a beacon of its own.
    public func check(_ input: [UInt8], sequence: UInt32) async {
        var fields = input.split(separator: 0xFF, maxSplits: Self.fieldCount - 1, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        fields += Array(repeating: "", count: max(0, Self.fieldCount - fields.count))
        var answers: [[Outcome]] = []
        for (name, storage) in engines {
            let outcomes = await Self.run(fields, sequence: sequence, on: storage, engine: name)
            for case .answered(let json) in outcomes {
                for text in Self.texts(inJSON: json) {
                    if let scalar = TextRule.refused(in: text, .freeText) {
                        Self.broken("\(name) answered text holding U+\(String(scalar.value, radix: 16, uppercase: true)): \(json)", input)
                    }
                }
            }
            answers.append(outcomes)
        }
        for (index, outcomes) in answers.enumerated().dropFirst() where outcomes != answers[0] {
            Self.broken("\(engines[0].name) and \(engines[index].name) answered apart:\n\(answers[0])\n\(outcomes)", input)
        }
    }

    /// What one call came to: its answer as JSON, or its refusal.
    enum Outcome: Equatable, CustomStringConvertible {
        case answered(String)
        case refused(String)

        var description: String {
            switch self {
            case .answered(let json): "answered \(json)"
            case .refused(let why): "refused \(why)"
            }
        }
    }

    /// The calls an input makes, in order, on one engine.
    private static func run(_ fields: [String], sequence: UInt32, on storage: any ServerStorage, engine: String) async -> [Outcome] {
        let registry = BeaconRegistry(storage: storage, clock: clock)
        let id = AdvertisedIdJSON(type: .eddystone, id: Data((0..<16).map { UInt8(truncatingIfNeeded: sequence >> (8 * ($0 % 4))) }))
        let name = id.beaconName
        let description = fields[0], propertyKey = fields[1], propertyValue = fields[2], place = fields[3]
        let namespacedType = fields[4], query = fields[5], filter = fields[6], type = fields[7]
        var outcomes: [Outcome] = []
        func call(_ what: String, _ body: () async throws -> some Encodable) async {
            outcomes.append(await outcome(what, engine: engine, body))
        }

        await call("register") {
            try await registry.register(Beacon(advertisedId: id, description: description, properties: [propertyKey: propertyValue],
                                               indoorLevel: IndoorLevel(name: place), placeId: place), by: project)
        }
        if case .answered = outcomes.last {
            await call("read back") {
                let beacon = try await registry.beacon(named: name, by: project)
                guard beacon.description == description, beacon.properties == [propertyKey: propertyValue],
                      beacon.placeId == place, beacon.indoorLevel?.name == place else {
                    throw StorageContractBroken("the beacon read back is not the one registered: \(beacon)")
                }
                return beacon
            }
        }
        await call("attach") {
            try await registry.addAttachment(BeaconAttachment(namespacedType: namespacedType, data: Data(type.utf8.prefix(1024)) + [0]),
                                             to: name, by: project)
        }
        await call("list") { try await registry.list(query: query, pageSize: 5, pageToken: nil, by: project) }
        await call("attachments") { try await registry.attachments(of: name, namespacedType: filter, by: project) }
        await call("getforobserved") {
            try await registry.getForObserved(GetForObservedRequest(observations: [.init(advertisedId: id)],
                                                                    namespacedTypes: [filter]), by: project)
        }
        for kind in ["publication", "subscription"] {
            await call(kind) {
                let objectID = "\(kind.prefix(1))\(sequence % 4)"
                let change: ObjectChange
                if kind == "publication" {
                    change = .putPublication(try Validation.publication(
                        PublicationSpec(namespace: "", type: type, content: Data(description.utf8.prefix(100)), mediums: [.ble],
                                        mode: .both, expiresAtMs: FixedClock.nowMs + 60_000),
                        id: objectID, device: device.id, projectNamespace: project.namespace, nowMs: FixedClock.nowMs))
                } else {
                    change = .putSubscription(try Validation.subscription(
                        SubscriptionSpec(namespace: "", type: type, mediums: [.ble], mode: .both, expiresAtMs: 0),
                        id: objectID, device: device.id, projectNamespace: project.namespace, nowMs: FixedClock.nowMs))
                }
                _ = try await storage.applyChanges([change], device: device.id, limits: objectLimits)
                let types = kind == "publication"
                    ? try await storage.publications(device: device.id).filter { $0.id == objectID }.map(\.type)
                    : try await storage.subscriptions(device: device.id).filter { $0.id == objectID }.map(\.type)
                guard types == [type] else { throw StorageContractBroken("the \(kind) read back has the types \(types), not [\(type)]") }
                return types
            }
        }
        return outcomes
    }

    /// A call's outcome: its answer encoded as the HTTP API would (keys
    /// sorted, so that the engines' answers compare), a client's mistake as
    /// a refusal, and anything else (an engine's error, a broken read-back)
    /// as a broken promise.
    private static func outcome(_ what: String, engine: String, _ body: () async throws -> some Encodable) async -> Outcome {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let json = String(decoding: try encoder.encode(try await body()), as: UTF8.self)
            // An attachment's id is random: each engine's is its own.
            return .answered(json.replacing(/attachments\\\/[0-9a-f]+/, with: "attachments\\/ID"))
        } catch let error as APIError {
            guard error.error != .internalError else { broken("\(what) on \(engine): an internal error: \(error)", []) }
            return .refused(error.description)
        } catch {
            broken("\(what) on \(engine): \(String(reflecting: error))", [])
        }
    }

    /// Every string of a JSON text, keys included, as a client decodes them.
    private static func texts(inJSON json: String) -> [String] {
        func strings(_ value: Any) -> [String] {
            switch value {
            case let text as String: [text]
            case let array as [Any]: array.flatMap(strings)
            case let object as [String: Any]: object.keys + object.values.flatMap(strings)
            default: []
            }
        }
        guard let value = try? JSONSerialization.jsonObject(with: Data(json.utf8), options: .fragmentsAllowed) else {
            broken("an answer is not JSON: \(json)", [])
        }
        return strings(value)
    }

    private static func broken(_ promise: String, _ input: [UInt8]) -> Never {
        fatalError("storage-fuzz: \(promise)" + (input.isEmpty ? "" : " (input: \(input.count) bytes)"))
    }

    /// The server's clock, stopped, so that both engines' answers carry the same times.
    private struct FixedClock: WallClock {
        static let nowMs: UInt64 = 1_700_000_000_000
        var nowMs: UInt64 { Self.nowMs }
    }
}

/// A promise of the contract found broken where an error carries it.
struct StorageContractBroken: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
