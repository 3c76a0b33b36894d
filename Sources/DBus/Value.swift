/// A D-Bus object path, validated on construction.
public struct ObjectPath: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String

    public init(_ rawValue: String) throws(DBusError) {
        guard Self.isValid(rawValue) else { throw .invalidArgs("invalid object path '\(rawValue)'") }
        self.rawValue = rawValue
    }

    init(trusted rawValue: String) {
        self.rawValue = rawValue
    }

    public static let root = ObjectPath(trusted: "/")

    public var description: String { rawValue }

    /// The path of a child element; `element` must be a valid path element.
    public func appending(_ element: String) throws(DBusError) -> ObjectPath {
        try ObjectPath(rawValue == "/" ? "/\(element)" : "\(rawValue)/\(element)")
    }

    /// The path of a child element the caller builds from known-valid parts
    /// (letters, digits, underscores); anything else is a programming error.
    public func child(_ element: String) -> ObjectPath {
        child(element, "")
    }

    /// The path of a numbered child element, `prefix` followed by `number`
    /// in decimal (`publication12`); `prefix` as for ``child(_:)``.
    public func child(_ prefix: String, number: UInt64) -> ObjectPath {
        child(prefix, String(number))
    }

    private func child(_ prefix: String, _ suffix: String) -> ObjectPath {
        // Only the new element needs checking: `self` is valid already.
        precondition(!(prefix.isEmpty && suffix.isEmpty) && Self.areElementBytes(prefix) && Self.areElementBytes(suffix),
                     "invalid object path element '\(prefix)\(suffix)'")
        // Built in one buffer: `rawValue + "/" + element` made a string for each `+`.
        var path = rawValue == "/" ? "" : rawValue
        path.reserveCapacity(path.utf8.count + 1 + prefix.utf8.count + suffix.utf8.count)
        path += "/"
        path += prefix
        path += suffix
        return ObjectPath(trusted: path)
    }

    /// Whether `self` is `other` or lies below it.
    public func isDescendant(of other: ObjectPath) -> Bool {
        other.rawValue == "/" || rawValue == other.rawValue || rawValue.hasPrefix(other.rawValue + "/")
    }

    public static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Whether every byte of `text` may be in an element. Over its UTF-8
    /// buffer, not its `utf8` view: every Publish checks its new path's
    /// element, and the view's iterator cost more than the rest of the path.
    private static func areElementBytes(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { $0.allSatisfy(isElementByte) }
    }

    static func isValid(_ path: String) -> Bool {
        let bytes = Array(path.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        var previousSlash = true
        for byte in bytes.dropFirst() {
            if byte == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                guard isElementByte(byte) else { return false }
                previousSlash = false
            }
        }
        return true
    }

    private static func isElementByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || byte == UInt8(ascii: "_")
    }
}

extension ObjectPath: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("invalid object path literal \(value)") }
    }
}

/// One key-value pair of a D-Bus dictionary (`a{..}`).
public struct DictEntry: Hashable, Sendable {
    public var key: DBusValue
    public var value: DBusValue

    public init(_ key: DBusValue, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// Any D-Bus value, with enough type information to marshal it and to tell its
/// signature even when a container is empty.
public indirect enum DBusValue: Hashable, Sendable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(Signature)
    /// A file descriptor, closed when the last value holding it goes.
    case unixFD(UnixFileDescriptor)
    /// An array of values that all have the `element` signature.
    case array(element: Signature, [DBusValue])
    case dictionary(key: Signature, value: Signature, [DictEntry])
    case structure([DBusValue])
    case variant(DBusValue)

    /// This value's type signature.
    public var signature: Signature {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .array(let element, _): Signature(trusted: "a" + element.rawValue)
        case .dictionary(let key, let value, _): Signature(trusted: "a{\(key.rawValue)\(value.rawValue)}")
        case .structure(let members): Signature(trusted: "(" + members.map(\.signature.rawValue).joined() + ")")
        case .variant: "v"
        }
    }

    /// Checks what an `array`, `dictionary` or `structure` built in code holds: every
    /// element of the declared type, keys basic, structs non-empty.
    public func validate() throws(DBusError) {
        switch self {
        case .array(let element, let values):
            guard element.isSingleCompleteType else { throw .invalidArgs("array element '\(element)' is not one type") }
            for value in values {
                guard value.signature == element else {
                    throw .invalidArgs("array of '\(element)' holds a '\(value.signature)'")
                }
                try value.validate()
            }
        case .dictionary(let key, let value, let entries):
            _ = try Signature("a{\(key.rawValue)\(value.rawValue)}")
            for entry in entries {
                guard entry.key.signature == key, entry.value.signature == value else {
                    throw .invalidArgs("dictionary of '{\(key)\(value)}' holds '{\(entry.key.signature)\(entry.value.signature)}'")
                }
                try entry.value.validate()
            }
        case .structure(let members):
            guard !members.isEmpty else { throw .invalidArgs("empty struct") }
            for member in members { try member.validate() }
        case .variant(let inner):
            try inner.validate()
        case .objectPath, .signature, .string, .byte, .bool, .int16, .uint16, .int32, .uint32,
             .int64, .uint64, .double, .unixFD:
            break
        }
    }
}

// Accessors that unwrap one case, for decoding option dictionaries.
extension DBusValue {
    public var bool: Bool? { if case .bool(let v) = self { v } else { nil } }
    public var string: String? { if case .string(let v) = self { v } else { nil } }
    public var uint32: UInt32? { if case .uint32(let v) = self { v } else { nil } }
    public var int16: Int16? { if case .int16(let v) = self { v } else { nil } }
    public var int32: Int32? { if case .int32(let v) = self { v } else { nil } }
    public var int64: Int64? { if case .int64(let v) = self { v } else { nil } }
    public var uint64: UInt64? { if case .uint64(let v) = self { v } else { nil } }
    public var double: Double? { if case .double(let v) = self { v } else { nil } }
    public var objectPath: ObjectPath? { if case .objectPath(let v) = self { v } else { nil } }

    /// The strings of an `as` value.
    public var strings: [String]? {
        guard case .array(let element, let values) = self, element == "s" else { return nil }
        return values.compactMap(\.string)
    }

    /// The bytes of an `ay` value.
    public var bytes: [UInt8]? {
        guard case .array(let element, let values) = self, element == "y" else { return nil }
        return values.map { if case .byte(let b) = $0 { b } else { 0 } }
    }

    /// The entries of an `a{sv}` value, keyed by string.
    public var stringVariantDictionary: [String: DBusValue]? {
        guard case .dictionary(let key, let value, let entries) = self, key == "s", value == "v" else { return nil }
        var result: [String: DBusValue] = [:]
        for entry in entries {
            guard let name = entry.key.string, case .variant(let inner) = entry.value else { return nil }
            result[name] = inner
        }
        return result
    }

    /// Builds an `as` value.
    public static func strings(_ values: [String]) -> DBusValue {
        .array(element: "s", values.map(DBusValue.string))
    }

    /// Builds an `ay` value.
    public static func bytes(_ values: [UInt8]) -> DBusValue {
        .array(element: "y", values.map(DBusValue.byte))
    }

    /// Builds an `a{sv}` value.
    public static func vardict(_ values: [String: DBusValue]) -> DBusValue {
        .dictionary(key: "s", value: "v", values.sorted { $0.key < $1.key }.map {
            DictEntry(.string($0.key), .variant($0.value))
        })
    }
}
