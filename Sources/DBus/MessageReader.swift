import CSystemd
import Glibc

/// Reads the body of an sd-bus message, checking every value's type against what
/// the caller expects. Valid only on the bus thread, while the message lives.
@BusActor
public struct MessageReader {
    let message: OpaquePointer

    init(_ message: OpaquePointer) {
        self.message = message
    }

    /// The signature of the whole body.
    public var signature: Signature {
        Signature(trusted: sd_bus_message_get_signature(message, 1).map { String(cString: $0) } ?? "")
    }

    /// Whether every value of the current container has been read.
    public var isAtEnd: Bool {
        sd_bus_message_at_end(message, 0) > 0
    }

    /// Reads the next value as `T`; throws `InvalidArgs` when it has another type.
    public func read<T: DBusDecodable>(_: T.Type = T.self) throws(DBusError) -> T {
        try T(from: self)
    }

    /// Reads the next value, whatever its type.
    public func readValue() throws(DBusError) -> DBusValue {
        let (code, contents) = try peek()
        switch code {
        case UInt8(ascii: "y"): return .byte(try readBasic(code, UInt8(0)))
        case UInt8(ascii: "b"): return .bool(try readBasic(code, Int32(0)) != 0)
        case UInt8(ascii: "n"): return .int16(try readBasic(code, Int16(0)))
        case UInt8(ascii: "q"): return .uint16(try readBasic(code, UInt16(0)))
        case UInt8(ascii: "i"): return .int32(try readBasic(code, Int32(0)))
        case UInt8(ascii: "u"): return .uint32(try readBasic(code, UInt32(0)))
        case UInt8(ascii: "x"): return .int64(try readBasic(code, Int64(0)))
        case UInt8(ascii: "t"): return .uint64(try readBasic(code, UInt64(0)))
        case UInt8(ascii: "d"): return .double(try readBasic(code, Double(0)))
        case UInt8(ascii: "h"): return .unixFD(try UnixFileDescriptor(duplicating: try readBasic(code, Int32(-1))))
        case UInt8(ascii: "s"): return .string(try readString(code))
        case UInt8(ascii: "o"): return .objectPath(ObjectPath(trusted: try readString(code)))
        case UInt8(ascii: "g"): return .signature(Signature(trusted: try readString(code)))
        case UInt8(ascii: "v"):
            return .variant(try inContainer(code, contents) { () throws(DBusError) in try readValue() })
        case UInt8(ascii: "r"):
            return .structure(try inContainer(code, contents) { () throws(DBusError) in try readAll() })
        case UInt8(ascii: "a"):
            let element = Signature(trusted: contents)
            if contents.first == "{" {
                let inner = Signature(trusted: String(contents.dropFirst().dropLast()))
                let types = inner.completeTypes
                let entries = try inContainer(code, contents) { () throws(DBusError) in
                    var entries: [DictEntry] = []
                    while !isAtEnd {
                        let pair = try inContainer(UInt8(ascii: "e"), inner.rawValue) { () throws(DBusError) in
                            DictEntry(try readValue(), try readValue())
                        }
                        entries.append(pair)
                    }
                    return entries
                }
                return .dictionary(key: types[0], value: types[1], entries)
            }
            return .array(element: element, try inContainer(code, contents) { () throws(DBusError) in try readAll() })
        default:
            throw .invalidArgs("unsupported type code \(code)")
        }
    }

    /// Reads every remaining value of the current container.
    public func readAll() throws(DBusError) -> [DBusValue] {
        var values: [DBusValue] = []
        while !isAtEnd { values.append(try readValue()) }
        return values
    }

    /// Reads a struct: `body` reads its members in order.
    public func readStruct<T>(_ signature: Signature, _ body: () throws(DBusError) -> T) throws(DBusError) -> T {
        try expect(Signature(trusted: "(\(signature.rawValue))"))
        return try inContainer(UInt8(ascii: "r"), signature.rawValue, body)
    }

    // MARK: - Building blocks for DBusDecodable conformances

    /// The next value's type code and, for containers, its contents signature.
    func peek() throws(DBusError) -> (UInt8, String) {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        let result = sd_bus_message_peek_type(message, &type, &contents)
        try check(result, "reading message")
        guard result > 0 else { throw .invalidArgs("message has fewer arguments than expected") }
        return (UInt8(bitPattern: type), contents.map { String(cString: $0) } ?? "")
    }

    /// Throws unless the next value has exactly `signature`. Compares in
    /// place: this runs for every argument of every call.
    func expect(_ signature: Signature) throws(DBusError) {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        let result = sd_bus_message_peek_type(message, &type, &contents)
        try check(result, "reading message")
        guard result > 0 else { throw .invalidArgs("message has fewer arguments than expected") }
        let code = UInt8(bitPattern: type)
        var expected = signature.rawValue
        let matches = expected.withUTF8 { bytes -> Bool in
            switch code {
            case UInt8(ascii: "a"):
                guard let contents, bytes.first == code else { return false }
                return strlen(contents) == bytes.count - 1 && memcmp(contents, bytes.baseAddress! + 1, bytes.count - 1) == 0
            case UInt8(ascii: "r"):
                guard let contents, bytes.count >= 2, bytes.first == UInt8(ascii: "(") else { return false }
                return strlen(contents) == bytes.count - 2 && memcmp(contents, bytes.baseAddress! + 1, bytes.count - 2) == 0
            default:
                return bytes.count == 1 && bytes[0] == code
            }
        }
        guard matches else {
            let inner = contents.map { String(cString: $0) } ?? ""
            let found = switch code {
            case UInt8(ascii: "a"): "a" + inner
            case UInt8(ascii: "r"): "(" + inner + ")"
            default: String(Unicode.Scalar(code))
            }
            throw .invalidArgs("expected a value of type '\(signature)', found '\(found)'")
        }
    }

    func readBasic<T: BitwiseCopyable>(_ code: UInt8, _ initial: T) throws(DBusError) -> T {
        var value = initial
        try check(sd_bus_message_read_basic(message, CChar(bitPattern: code), &value), "reading '\(Unicode.Scalar(code))'")
        return value
    }

    func readString(_ code: UInt8) throws(DBusError) -> String {
        var pointer: UnsafePointer<CChar>?
        try check(sd_bus_message_read_basic(message, CChar(bitPattern: code), &pointer), "reading a string")
        return pointer.map { String(cString: $0) } ?? ""
    }

    func readFixedArray<T: BitwiseCopyable>(_ code: UInt8, of _: T.Type) throws(DBusError) -> [T] {
        try expect(Signature(trusted: "a" + String(Unicode.Scalar(code))))
        var pointer: UnsafeRawPointer?
        var size = 0
        try check(sd_bus_message_read_array(message, CChar(bitPattern: code), &pointer, &size), "reading an array")
        guard let pointer, size > 0 else { return [] }
        let count = size / MemoryLayout<T>.stride
        return Array(UnsafeBufferPointer(start: pointer.assumingMemoryBound(to: T.self), count: count))
    }

    func inContainer<T>(_ code: UInt8, _ contents: String, _ body: () throws(DBusError) -> T) throws(DBusError) -> T {
        try check(sd_bus_message_enter_container(message, CChar(bitPattern: code), contents), "entering '\(contents)'")
        let value = try body()
        try check(sd_bus_message_exit_container(message), "leaving '\(contents)'")
        return value
    }
}
