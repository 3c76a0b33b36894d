import Glibc

/// A Swift type with a fixed D-Bus signature.
public protocol DBusType {
    static var dbusSignature: Signature { get }
}

/// A Swift type read from a D-Bus message.
public protocol DBusDecodable: DBusType {
    @BusActor init(from reader: MessageReader) throws(DBusError)
}

/// A Swift type appended to a D-Bus message.
public protocol DBusEncodable: DBusType {
    @BusActor func encode(to writer: MessageWriter) throws(DBusError)
}

public typealias DBusCodable = DBusDecodable & DBusEncodable

/// A fixed-size basic type: read and written as itself.
protocol DBusFixedBasic: DBusCodable, BitwiseCopyable {
    static var typeCode: UInt8 { get }
    static var zero: Self { get }
}

extension DBusFixedBasic {
    public static var dbusSignature: Signature { Signature(trusted: String(Unicode.Scalar(typeCode))) }

    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect(Self.dbusSignature)
        self = try reader.readBasic(Self.typeCode, Self.zero)
    }

    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.appendBasic(Self.typeCode, self)
    }
}

extension UInt8: DBusFixedBasic { static let typeCode = UInt8(ascii: "y"); static let zero: UInt8 = 0 }
extension Int16: DBusFixedBasic { static let typeCode = UInt8(ascii: "n"); static let zero: Int16 = 0 }
extension UInt16: DBusFixedBasic { static let typeCode = UInt8(ascii: "q"); static let zero: UInt16 = 0 }
extension Int32: DBusFixedBasic { static let typeCode = UInt8(ascii: "i"); static let zero: Int32 = 0 }
extension UInt32: DBusFixedBasic { static let typeCode = UInt8(ascii: "u"); static let zero: UInt32 = 0 }
extension Int64: DBusFixedBasic { static let typeCode = UInt8(ascii: "x"); static let zero: Int64 = 0 }
extension UInt64: DBusFixedBasic { static let typeCode = UInt8(ascii: "t"); static let zero: UInt64 = 0 }
extension Double: DBusFixedBasic { static let typeCode = UInt8(ascii: "d"); static let zero: Double = 0 }

extension Bool: DBusCodable {
    public static var dbusSignature: Signature { "b" }

    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect("b")
        // sd-bus stores a boolean as a 32-bit int.
        self = try reader.readBasic(UInt8(ascii: "b"), Int32(0)) != 0
    }

    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.appendBasic(UInt8(ascii: "b"), Int32(self ? 1 : 0))
    }
}

extension String: DBusCodable {
    public static var dbusSignature: Signature { "s" }

    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect("s")
        self = try reader.readString(UInt8(ascii: "s"))
    }

    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.appendString(UInt8(ascii: "s"), self)
    }
}

extension ObjectPath: DBusCodable {
    public static var dbusSignature: Signature { "o" }

    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect("o")
        self.init(trusted: try reader.readString(UInt8(ascii: "o")))
    }

    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.appendString(UInt8(ascii: "o"), rawValue)
    }
}

extension Signature: DBusCodable {
    public static var dbusSignature: Signature { "g" }

    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect("g")
        self.init(trusted: try reader.readString(UInt8(ascii: "g")))
    }

    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.appendString(UInt8(ascii: "g"), rawValue)
    }
}

/// A file descriptor passed over the bus (`h`), owned: it is closed when the
/// last reference goes, so a value read from a message and then dropped (a
/// rejected argument, a failed decode) leaks nothing.
public final class UnixFileDescriptor: DBusCodable, Hashable, Sendable {
    /// The descriptor; valid while this object lives.
    public let rawValue: Int32

    /// Takes ownership of `rawValue`.
    public init(taking rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// Owns a duplicate of `rawValue` (close-on-exec); the caller keeps the original.
    public convenience init(duplicating rawValue: Int32) throws(DBusError) {
        let owned = fcntl(rawValue, F_DUPFD_CLOEXEC, 3)
        guard owned >= 0 else { throw .system(-errno, "duplicating a file descriptor") }
        self.init(taking: owned)
    }

    deinit {
        close(rawValue)
    }

    public static var dbusSignature: Signature { "h" }

    /// Duplicates the descriptor the message holds (the message keeps its own).
    @BusActor public convenience init(from reader: MessageReader) throws(DBusError) {
        try reader.expect("h")
        try self.init(duplicating: try reader.readBasic(UInt8(ascii: "h"), Int32(-1)))
    }

    /// Appends a duplicate of the descriptor (sd-bus makes it); this one stays open.
    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.appendBasic(UInt8(ascii: "h"), rawValue)
    }

    /// Two values are equal when they are the same open descriptor.
    public static func == (lhs: UnixFileDescriptor, rhs: UnixFileDescriptor) -> Bool {
        lhs.rawValue == rhs.rawValue
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(rawValue)
    }
}

/// A value of any type inside a variant (`v`).
public struct Variant: DBusCodable, Hashable, Sendable {
    public var value: DBusValue

    public init(_ value: DBusValue) {
        self.value = value
    }

    public static var dbusSignature: Signature { "v" }

    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect("v")
        guard case .variant(let inner) = try reader.readValue() else {
            throw .invalidArgs("expected a variant")
        }
        value = inner
    }

    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        try writer.append(DBusValue.variant(value))
    }
}

extension Array: DBusType where Element: DBusType {
    public static var dbusSignature: Signature { Signature(trusted: "a" + Element.dbusSignature.rawValue) }
}

extension Array: DBusDecodable where Element: DBusDecodable {
    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        if Element.self == UInt8.self {
            // Byte arrays (message contents) are copied in one piece. The types are
            // equal, so the bit cast is exact (an `as!` would convert element-wise).
            self = unsafeBitCast(try reader.readFixedArray(UInt8(ascii: "y"), of: UInt8.self), to: [Element].self)
            return
        }
        try reader.expect(Self.dbusSignature)
        self = try reader.inContainer(UInt8(ascii: "a"), Element.dbusSignature.rawValue) { () throws(DBusError) in
            var elements: [Element] = []
            while !reader.isAtEnd { elements.append(try Element(from: reader)) }
            return elements
        }
    }
}

extension Array: DBusEncodable where Element: DBusEncodable {
    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        // A type check, not a cast: an empty [String] would cast to [UInt8] too.
        if Element.self == UInt8.self {
            try writer.appendFixedArray(UInt8(ascii: "y"), unsafeBitCast(self, to: [UInt8].self))
            return
        }
        try writer.container(UInt8(ascii: "a"), Element.dbusSignature.rawValue) { () throws(DBusError) in
            for element in self { try element.encode(to: writer) }
        }
    }
}

extension Dictionary: DBusType where Key: DBusType, Value: DBusType {
    public static var dbusSignature: Signature {
        Signature(trusted: "a{\(Key.dbusSignature.rawValue)\(Value.dbusSignature.rawValue)}")
    }
}

extension Dictionary: DBusDecodable where Key: DBusDecodable, Value: DBusDecodable {
    @BusActor public init(from reader: MessageReader) throws(DBusError) {
        try reader.expect(Self.dbusSignature)
        let entry = "\(Key.dbusSignature.rawValue)\(Value.dbusSignature.rawValue)"
        self = try reader.inContainer(UInt8(ascii: "a"), "{\(entry)}") { () throws(DBusError) in
            var result: [Key: Value] = [:]
            while !reader.isAtEnd {
                try reader.inContainer(UInt8(ascii: "e"), entry) { () throws(DBusError) in
                    let key = try Key(from: reader)
                    guard result[key] == nil else { throw .invalidArgs("duplicate dictionary key '\(key)'") }
                    result[key] = try Value(from: reader)
                }
            }
            return result
        }
    }
}

extension Dictionary: DBusEncodable where Key: DBusEncodable, Value: DBusEncodable {
    @BusActor public func encode(to writer: MessageWriter) throws(DBusError) {
        let entry = "\(Key.dbusSignature.rawValue)\(Value.dbusSignature.rawValue)"
        try writer.container(UInt8(ascii: "a"), "{\(entry)}") { () throws(DBusError) in
            for (key, value) in self {
                try writer.container(UInt8(ascii: "e"), entry) { () throws(DBusError) in
                    try key.encode(to: writer)
                    try value.encode(to: writer)
                }
            }
        }
    }
}
