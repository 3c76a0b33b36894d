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
        Signature(trusted: CString.string(sd_bus_message_get_signature(message, 1)))
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

    // MARK: - Bounded reading of untrusted arguments

    /// Reads a string (`s`) of at most `maxBytes` bytes. sd-bus hands out a
    /// pointer into the message, so a longer one is refused before anything
    /// is copied; `what` names the argument in the error.
    public func readString(maxBytes: Int, _ what: @autoclosure () -> String) throws(DBusError) -> String {
        try expect("s")
        return try readBoundedString(UInt8(ascii: "s"), maxBytes: maxBytes, what())
    }

    /// Reads an object path (`o`) of at most `maxBytes` bytes, refused before it is copied.
    public func readObjectPath(maxBytes: Int, _ what: @autoclosure () -> String) throws(DBusError) -> ObjectPath {
        try expect("o")
        return ObjectPath(trusted: try readBoundedString(UInt8(ascii: "o"), maxBytes: maxBytes, what()))
    }

    /// Reads a byte array (`ay`) of at most `maxCount` bytes: sd-bus hands out
    /// the bytes in place, so a longer one is refused before it is copied.
    public func readBytes(maxCount: Int, _ what: @autoclosure () -> String) throws(DBusError) -> [UInt8] {
        var pointer: UnsafeRawPointer?
        var size = 0
        try entered(sd_bus_message_read_array(message, CChar(bitPattern: UInt8(ascii: "y")), &pointer, &size), "ay",
                    "reading an array")
        guard size <= maxCount else { throw .invalidArgs("\(what()) is \(size) bytes; at most \(maxCount) are allowed") }
        guard let pointer, size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: size))
    }

    /// Reads a dictionary with string keys (`a{s…}`, the value type `value`)
    /// one entry at a time, without building it: `body` gets each key and
    /// must read exactly one value of type `value`, or throw to refuse the
    /// whole call at that entry (nothing after it is read). At most
    /// `maxEntries` entries, keys of at most `maxKeyBytes` bytes; a repeated
    /// key is refused.
    public func readEntries(value: Signature, maxEntries: Int, maxKeyBytes: Int, _ what: @autoclosure () -> String,
                            _ body: (String) throws(DBusError) -> Void) throws(DBusError) {
        let entry = "s" + value.rawValue
        let contents = "{\(entry)}"
        try entered(CString.with(contents) { sd_bus_message_enter_container(message, CChar(bitPattern: UInt8(ascii: "a")), $0) },
                    Signature(trusted: "a" + contents), "entering '\(contents)'")
        var seen: Set<String> = []
        while !isAtEnd {
            guard seen.count < maxEntries else { throw .invalidArgs("\(what()) has more than \(maxEntries) entries") }
            try inContainer(UInt8(ascii: "e"), entry) { () throws(DBusError) in
                let key = try readBoundedString(UInt8(ascii: "s"), maxBytes: maxKeyBytes, "a key of \(what())")
                guard seen.insert(key).inserted else { throw .invalidArgs("\(what()) has the key '\(key)' twice") }
                try body(key)
            }
        }
        try check(sd_bus_message_exit_container(message), "leaving '\(contents)'")
    }

    /// Checks the `result` of entering an array of type `signature` (reading
    /// it, for a byte array) without a look first: sd-bus says -ENXIO when the
    /// next value has another type, and 0 past the last argument, which
    /// ``expect(_:)`` then explains. A look first (`sd_bus_message_peek_type`)
    /// allocated a copy of the element type for each array of each call.
    private func entered(_ result: Int32, _ signature: Signature, _ what: @autoclosure () -> String) throws(DBusError) {
        guard result <= 0 else { return }
        if result == 0 || result == -ENXIO { try expect(signature) }
        try check(result == 0 ? -ENXIO : result, what())
    }

    /// The type of the value inside the next variant (`v`), without reading it.
    public func peekVariantContents() throws(DBusError) -> Signature {
        let (code, contents) = try peek()
        guard code == UInt8(ascii: "v") else { throw .invalidArgs("expected a variant, found '\(Unicode.Scalar(code))'") }
        return Signature(trusted: contents)
    }

    /// Reads the next value, whatever its type, within `budget`: each value
    /// costs one, each string and byte array its bytes too, and nesting is
    /// bounded. A message over budget is refused as soon as it is found to
    /// be, so a hostile argument costs its bytes in the message and no more.
    public func readValue(within budget: inout ReadBudget) throws(DBusError) -> DBusValue {
        guard budget.depth > 0 else { throw .invalidArgs("\(budget.what) is nested too deeply") }
        try budget.charge(values: 1, bytes: 0)
        let (code, contents) = try peek()
        switch code {
        case UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"):
            let text = try readBoundedString(code, maxBytes: budget.bytes, budget.what)
            try budget.charge(values: 0, bytes: text.utf8.count)
            return code == UInt8(ascii: "s") ? .string(text)
                : code == UInt8(ascii: "o") ? .objectPath(ObjectPath(trusted: text)) : .signature(Signature(trusted: text))
        case UInt8(ascii: "v"), UInt8(ascii: "r"), UInt8(ascii: "a"):
            budget.depth -= 1
            defer { budget.depth += 1 }
            if code == UInt8(ascii: "v") {
                return .variant(try inContainer(code, contents) { () throws(DBusError) in try readValue(within: &budget) })
            }
            if code == UInt8(ascii: "a"), contents == "y" {
                let bytes = try readBytes(maxCount: budget.bytes, budget.what)
                try budget.charge(values: bytes.count, bytes: bytes.count)
                return .bytes(bytes)
            }
            if code == UInt8(ascii: "a"), contents.first == "{" {
                let inner = String(contents.dropFirst().dropLast())
                let types = Signature(trusted: inner).completeTypes
                let entries = try inContainer(code, contents) { () throws(DBusError) -> [DictEntry] in
                    var entries: [DictEntry] = []
                    while !isAtEnd {
                        entries.append(try inContainer(UInt8(ascii: "e"), inner) { () throws(DBusError) in
                            DictEntry(try readValue(within: &budget), try readValue(within: &budget))
                        })
                    }
                    return entries
                }
                return .dictionary(key: types[0], value: types[1], entries)
            }
            let values = try inContainer(code, contents) { () throws(DBusError) -> [DBusValue] in
                var values: [DBusValue] = []
                while !isAtEnd { values.append(try readValue(within: &budget)) }
                return values
            }
            return code == UInt8(ascii: "r") ? .structure(values) : .array(element: Signature(trusted: contents), values)
        default:
            // Fixed-size basic types and file descriptors: no more than their size.
            return try readValue()
        }
    }

    // MARK: - Building blocks for DBusDecodable conformances

    /// The next value's type code and, for containers, its contents signature.
    func peek() throws(DBusError) -> (UInt8, String) {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        let result = sd_bus_message_peek_type(message, &type, &contents)
        try check(result, "reading message")
        guard result > 0 else { throw .invalidArgs("message has fewer arguments than expected") }
        return (UInt8(bitPattern: type), CString.string(contents))
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
        let matches = CString.withUTF8(signature.rawValue) { bytes -> Bool in
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
            let inner = CString.string(contents)
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
        return CString.string(pointer)
    }

    /// A string-like value (`s`, `o`, `g`) of at most `maxBytes` bytes, measured
    /// in the message before it is copied.
    func readBoundedString(_ code: UInt8, maxBytes: Int, _ what: @autoclosure () -> String) throws(DBusError) -> String {
        var pointer: UnsafePointer<CChar>?
        try check(sd_bus_message_read_basic(message, CChar(bitPattern: code), &pointer), "reading a string")
        guard let pointer else { return "" }
        let length = strnlen(pointer, maxBytes + 1)
        guard length <= maxBytes else { throw .invalidArgs("\(what()) is longer than \(maxBytes) bytes") }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
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
        // `withCString`, not the implicit conversion: that copied the contents to the heap on every container.
        try check(CString.with(contents) { sd_bus_message_enter_container(message, CChar(bitPattern: code), $0) },
                  "entering '\(contents)'")
        let value = try body()
        try check(sd_bus_message_exit_container(message), "leaving '\(contents)'")
        return value
    }
}

/// What a decoder may still build of an untrusted argument (see
/// ``MessageReader/readValue(within:)``).
public struct ReadBudget: Sendable {
    /// Values left: every value counts one, every byte of a byte array too.
    public var values: Int
    /// Bytes of strings and byte arrays left.
    public var bytes: Int
    /// Containers that may still be entered.
    public var depth: Int
    /// The argument, for error messages.
    public let what: String

    public init(values: Int, bytes: Int, depth: Int, what: String) {
        self.values = values
        self.bytes = bytes
        self.depth = depth
        self.what = what
    }

    mutating func charge(values: Int, bytes: Int) throws(DBusError) {
        self.values -= values
        self.bytes -= bytes
        guard self.values >= 0 else { throw .invalidArgs("\(what) holds too many values") }
        guard self.bytes >= 0 else { throw .invalidArgs("\(what) is too large") }
    }
}
