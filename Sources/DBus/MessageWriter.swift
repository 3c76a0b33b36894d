import CSystemd

/// Appends values to an sd-bus message under construction. Valid only on the bus
/// thread, while the message lives.
@BusActor
public struct MessageWriter {
    let message: OpaquePointer

    init(_ message: OpaquePointer) {
        self.message = message
    }

    /// Appends a typed value.
    public func append<T: DBusEncodable>(_ value: T) throws(DBusError) {
        try value.encode(to: self)
    }

    /// Appends any value; containers are checked against their declared types.
    public func append(_ value: DBusValue) throws(DBusError) {
        switch value {
        case .byte(let v): try appendBasic(UInt8(ascii: "y"), v)
        case .bool(let v): try appendBasic(UInt8(ascii: "b"), Int32(v ? 1 : 0))
        case .int16(let v): try appendBasic(UInt8(ascii: "n"), v)
        case .uint16(let v): try appendBasic(UInt8(ascii: "q"), v)
        case .int32(let v): try appendBasic(UInt8(ascii: "i"), v)
        case .uint32(let v): try appendBasic(UInt8(ascii: "u"), v)
        case .int64(let v): try appendBasic(UInt8(ascii: "x"), v)
        case .uint64(let v): try appendBasic(UInt8(ascii: "t"), v)
        case .double(let v): try appendBasic(UInt8(ascii: "d"), v)
        case .unixFD(let v): try v.encode(to: self)
        case .string(let v): try appendString(UInt8(ascii: "s"), v)
        case .objectPath(let v): try appendString(UInt8(ascii: "o"), v.rawValue)
        case .signature(let v): try appendString(UInt8(ascii: "g"), v.rawValue)
        case .variant(let inner):
            try container(UInt8(ascii: "v"), inner.signature.rawValue) { () throws(DBusError) in try append(inner) }
        case .structure(let members):
            guard !members.isEmpty else { throw .invalidArgs("empty struct") }
            let contents = members.map(\.signature.rawValue).joined()
            try container(UInt8(ascii: "r"), contents) { () throws(DBusError) in
                for member in members { try append(member) }
            }
        case .array(let element, let values):
            guard element.isSingleCompleteType else { throw .invalidArgs("array element '\(element)' is not one type") }
            if element == "y", let bytes = value.bytes {
                try appendFixedArray(UInt8(ascii: "y"), bytes)
                return
            }
            try container(UInt8(ascii: "a"), element.rawValue) { () throws(DBusError) in
                for value in values {
                    guard value.signature == element else {
                        throw .invalidArgs("array of '\(element)' holds a '\(value.signature)'")
                    }
                    try append(value)
                }
            }
        case .dictionary(let key, let valueType, let entries):
            let entry = "\(key.rawValue)\(valueType.rawValue)"
            _ = try Signature("a{\(entry)}")
            try container(UInt8(ascii: "a"), "{\(entry)}") { () throws(DBusError) in
                for pair in entries {
                    guard pair.key.signature == key, pair.value.signature == valueType else {
                        throw .invalidArgs("dictionary of '{\(entry)}' holds '{\(pair.key.signature)\(pair.value.signature)}'")
                    }
                    try container(UInt8(ascii: "e"), entry) { () throws(DBusError) in
                        try append(pair.key)
                        try append(pair.value)
                    }
                }
            }
        }
    }

    /// Appends a struct whose members `body` appends.
    public func appendStruct(_ signature: Signature, _ body: () throws(DBusError) -> Void) throws(DBusError) {
        try container(UInt8(ascii: "r"), signature.rawValue, body)
    }

    // MARK: - Building blocks for DBusEncodable conformances

    func appendBasic<T: BitwiseCopyable>(_ code: UInt8, _ value: T) throws(DBusError) {
        var value = value
        try check(sd_bus_message_append_basic(message, CChar(bitPattern: code), &value), "appending '\(Unicode.Scalar(code))'")
    }

    func appendString(_ code: UInt8, _ value: String) throws(DBusError) {
        guard !CString.containsNUL(value) else { throw .invalidArgs("strings cannot contain NUL") }
        let result = CString.with(value) { sd_bus_message_append_basic(message, CChar(bitPattern: code), $0) }
        try check(result, "appending a string")
    }

    func appendFixedArray<T: BitwiseCopyable>(_ code: UInt8, _ values: [T]) throws(DBusError) {
        try check(Self.appendArray(message, code, values), "appending an array")
    }

    /// Not isolated, so that the closure it hands the standard library is not
    /// checked for its executor each time (``CString``).
    private nonisolated static func appendArray<T: BitwiseCopyable>(_ message: OpaquePointer, _ code: UInt8, _ values: [T]) -> Int32 {
        values.withUnsafeBytes { bytes in
            sd_bus_message_append_array(message, CChar(bitPattern: code), bytes.baseAddress, bytes.count)
        }
    }

    func container(_ code: UInt8, _ contents: String, _ body: () throws(DBusError) -> Void) throws(DBusError) {
        // `withCString`, not the implicit conversion: that copied the contents to the heap on every container.
        try check(CString.with(contents) { sd_bus_message_open_container(message, CChar(bitPattern: code), $0) },
                  "opening '\(contents)'")
        try body()
        try check(sd_bus_message_close_container(message), "closing '\(contents)'")
    }
}
