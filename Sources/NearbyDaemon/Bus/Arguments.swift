import DBus
import NearbyCore

/// A method call's arguments as nearbyd reads them from its clients. Every
/// string, byte array and dictionary is measured in the message and refused
/// past its bound before anything is copied out of it, and an options
/// dictionary is checked key by key as it is read, so a hostile argument
/// costs the caller's own message and never a decoded copy of it. A refusal
/// is `org.nearbyd.Error.InvalidArguments`, naming the argument.
@BusActor
struct Arguments {
    /// The bounds on the wire: each argument's own rule (MessageRules,
    /// UpstreamMessage) is tighter and checked after it is read.
    enum Bounds {
        /// Any string or object path argument other than message content.
        static let stringBytes = 4096
        /// An `a{sv}` of options: entries are bounded by the keys a method
        /// knows; the values of all of them together by this.
        static let optionValues = 256
        static let optionBytes = 16_384
        /// Containers inside an option (the nested `Strategy` dictionary and its arrays).
        static let optionDepth = 6
    }

    private let reader: MessageReader

    init(_ call: MethodCall) {
        reader = call.arguments
    }

    /// The arguments of a message read some other way (a ``DetachedMessage``).
    init(_ reader: MessageReader) {
        self.reader = reader
    }

    func string(_ name: String, maxBytes: Int = Bounds.stringBytes) throws(DBusError) -> String {
        try nearbyErrors { () throws(DBusError) in try reader.readString(maxBytes: maxBytes, name) }
    }

    func objectPath(_ name: String) throws(DBusError) -> ObjectPath {
        try nearbyErrors { () throws(DBusError) in try reader.readObjectPath(maxBytes: Bounds.stringBytes, name) }
    }

    func bytes(_ name: String, maxCount: Int) throws(DBusError) -> [UInt8] {
        try nearbyErrors { () throws(DBusError) in try reader.readBytes(maxCount: maxCount, name) }
    }

    func bool() throws(DBusError) -> Bool {
        try reader.read(Bool.self)
    }

    func int64() throws(DBusError) -> Int64 {
        try reader.read(Int64.self)
    }

    /// An `a{ss}` of at most `maxEntries` entries whose keys and values come to at most `maxBytes`.
    func stringDictionary(_ name: String, maxEntries: Int, maxBytes: Int) throws(DBusError) -> [String: String] {
        try nearbyErrors { () throws(DBusError) in
            var result: [String: String] = [:]
            var left = maxBytes
            try reader.readEntries(value: "s", maxEntries: maxEntries, maxKeyBytes: maxBytes, name) { key throws(DBusError) in
                // Bounded by the whole, so that the error names the whole's limit, not what was left of it.
                let value = try reader.readString(maxBytes: maxBytes, "\(name)['\(key)']")
                left -= key.utf8.count + value.utf8.count
                guard left >= 0 else { throw .invalidArgs("\(name) is larger than \(maxBytes) bytes (its keys and values together)") }
                result[key] = value
            }
            return result
        }
    }

    /// An `a{sv}` of the keys in `allowed`, each of its type: an unknown key
    /// or a wrong type is refused before its value is read.
    func options(_ context: String, allowed: [String: Signature]) throws(DBusError) -> Options {
        var values: [String: DBusValue] = [:]
        var budget = ReadBudget(values: Bounds.optionValues, bytes: Bounds.optionBytes, depth: Bounds.optionDepth, what: context)
        try nearbyErrors { () throws(DBusError) in
            try reader.readEntries(value: "v", maxEntries: allowed.count, maxKeyBytes: Bounds.stringBytes, context) {
                key throws(DBusError) in
                guard let expected = allowed[key] else { throw Options.unknownKey(key, in: context, allowed: allowed).dbusError }
                let found = try reader.peekVariantContents()
                guard found == expected else { throw Options.wrongType(key, in: context, expected: expected, found: found).dbusError }
                guard case .variant(let value) = try reader.readValue(within: &budget) else {
                    throw .invalidArgs("'\(key)' in \(context) is not a variant")
                }
                values[key] = value
            }
        }
        return try checked { () throws(NearbyError) in try Options(values, allowed: allowed, context: context) }
    }

    /// The bounded reads refuse with the bus's InvalidArgs; clients of nearbyd
    /// get its own InvalidArguments, as for every other bad argument.
    private func nearbyErrors<T>(_ body: () throws(DBusError) -> T) throws(DBusError) -> T {
        do {
            return try body()
        } catch where error.name == DBusError.invalidArgs("").name {
            throw NearbyError.invalidArguments(error.message).dbusError
        }
    }
}
