import DBus
import NearbyBusContract
import NearbyCore

/// An `a{sv}` argument checked against the keys a method accepts and the type
/// each must have, so a typo or a wrongly typed variant is a named error rather
/// than a silently ignored option.
struct Options {
    private let values: [String: DBusValue]

    /// `allowed` maps each known key to its type; `context` names the argument in messages.
    init(_ raw: [String: Variant], allowed: [String: Signature], context: String) throws(NearbyError) {
        try self.init(raw.mapValues(\.value), allowed: allowed, context: context)
    }

    init(_ values: [String: DBusValue], allowed: [String: Signature], context: String) throws(NearbyError) {
        for (key, value) in values {
            guard let expected = allowed[key] else { throw Self.unknownKey(key, in: context, allowed: allowed) }
            guard value.signature == expected else {
                throw Self.wrongType(key, in: context, expected: expected, found: value.signature)
            }
        }
        self.values = values
    }

    /// The keys of one of the contract's dictionaries, with their types, as `allowed`.
    static func allowed(_ keys: [NearbyBusContract.Key]) -> [String: Signature] {
        Dictionary(uniqueKeysWithValues: keys.map { ($0.name, Signature(contract: $0.type)) })
    }

    static func unknownKey(_ key: String, in context: String, allowed: [String: Signature]) -> NearbyError {
        .invalidArguments("unknown key '\(key)' in \(context); known: \(allowed.keys.sorted().joined(separator: ", "))")
    }

    static func wrongType(_ key: String, in context: String, expected: Signature, found: Signature) -> NearbyError {
        .invalidArguments("'\(key)' in \(context) must be of type '\(expected)', not '\(found)'")
    }

    func has(_ key: String) -> Bool { values[key] != nil }
    func string(_ key: String) -> String? { values[key]?.string }
    func bool(_ key: String) -> Bool? { values[key]?.bool }
    func uint32(_ key: String) -> UInt32? { values[key]?.uint32 }
    func strings(_ key: String) -> [String]? { values[key]?.strings }
    func objectPath(_ key: String) -> ObjectPath? { values[key]?.objectPath }

    /// A nested `a{sv}`, checked in turn.
    func options(_ key: String, allowed: [String: Signature], context: String) throws(NearbyError) -> Options? {
        guard let nested = values[key]?.stringVariantDictionary else { return nil }
        return try Options(nested, allowed: allowed, context: context)
    }

    /// A string that must be one of `choices`' raw values.
    func choice<T: RawRepresentable & CaseIterable>(_ key: String, context: String) throws(NearbyError) -> T?
    where T.RawValue == String {
        guard let name = string(key) else { return nil }
        guard let value = T(rawValue: name) else {
            throw .invalidArguments("'\(key)' in \(context) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", ")), not '\(name)'")
        }
        return value
    }
}

/// The Strategy dictionary of Publish and Subscribe.
enum StrategyOptions {
    static let allowed = Options.allowed(NearbyBusContract.StrategyOption.all)

    /// The strategy, checked for bounds and contradictions against the daemon's mediums.
    static func parse(_ options: Options?, for owner: Strategy.Owner, enabled: Set<Medium>) throws(NearbyError) -> Strategy {
        var strategy = Strategy()
        guard let options else {
            return try strategy.validated(for: owner, enabled: enabled, explicitMediums: false)
        }
        typealias Option = NearbyBusContract.StrategyOption
        let context = NearbyBusContract.PublishOrSubscribeOption.strategy.name
        if let names = options.strings(Option.mediums.name) {
            var mediums: Set<Medium> = []
            for name in names {
                guard let medium = Medium(rawValue: name) else {
                    throw .invalidArguments("unknown medium '\(name)' in Strategy.Mediums; known: ble, audio")
                }
                guard mediums.insert(medium).inserted else {
                    throw .invalidArguments("medium '\(name)' appears twice in Strategy.Mediums")
                }
            }
            strategy.mediums = mediums
        }
        if let mode: DiscoveryMode = try options.choice(Option.mode.name, context: context) { strategy.mode = mode }
        if let ttl = options.uint32(Option.ttl.name) { strategy.ttlSeconds = ttl }
        if let distance: DistanceType = try options.choice(Option.distance.name, context: context) { strategy.distance = distance }
        if let background = options.bool(Option.allowInBackground.name) { strategy.allowInBackground = background }
        return try strategy.validated(for: owner, enabled: enabled, explicitMediums: options.has(Option.mediums.name))
    }
}
