/// A D-Bus type signature such as `a{sv}`: validated on construction.
public struct Signature: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// Validates `rawValue` against the D-Bus specification (length, nesting,
    /// dict entries only as array elements, basic-typed keys).
    public init(_ rawValue: String) throws(DBusError) {
        _ = try Self.parse(Array(rawValue.utf8))
        self.rawValue = rawValue
    }

    /// For signatures the caller knows to be valid: type literals in this module and
    /// signatures sd-bus has already checked.
    init(trusted rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// The single complete types this signature is a sequence of.
    public var completeTypes: [Signature] {
        // A validated signature parses; `trusted` ones come from sd-bus.
        (try? Self.parse(Array(rawValue.utf8)))?.map { Signature(trusted: $0) } ?? []
    }

    /// Whether this is one single complete type (what a variant or array element holds).
    public var isSingleCompleteType: Bool { completeTypes.count == 1 }

    static let basicCodes: Set<UInt8> = Set("ybnqiuxtdhsog".utf8)

    private static let maxLength = 255
    private static let maxDepth = 32

    private static func parse(_ bytes: [UInt8]) throws(DBusError) -> [String] {
        guard bytes.count <= maxLength else {
            throw .invalidArgs("signature longer than \(maxLength) bytes")
        }
        var types: [String] = []
        var index = 0
        while index < bytes.count {
            let start = index
            try parseOne(bytes, &index, arrays: 0, structs: 0, inArray: false)
            types.append(String(decoding: bytes[start..<index], as: UTF8.self))
        }
        return types
    }

    private static func parseOne(_ bytes: [UInt8], _ index: inout Int, arrays: Int, structs: Int,
                                 inArray: Bool) throws(DBusError) {
        guard index < bytes.count else { throw .invalidArgs("signature ends inside a type") }
        let code = bytes[index]
        index += 1
        switch code {
        case _ where basicCodes.contains(code), UInt8(ascii: "v"):
            return
        case UInt8(ascii: "a"):
            guard arrays < maxDepth else { throw .invalidArgs("arrays nested deeper than \(maxDepth)") }
            try parseOne(bytes, &index, arrays: arrays + 1, structs: structs, inArray: true)
        case UInt8(ascii: "("):
            guard structs < maxDepth else { throw .invalidArgs("structs nested deeper than \(maxDepth)") }
            var members = 0
            while index < bytes.count, bytes[index] != UInt8(ascii: ")") {
                try parseOne(bytes, &index, arrays: arrays, structs: structs + 1, inArray: false)
                members += 1
            }
            guard index < bytes.count else { throw .invalidArgs("unterminated struct") }
            guard members > 0 else { throw .invalidArgs("empty struct") }
            index += 1
        case UInt8(ascii: "{"):
            guard inArray else { throw .invalidArgs("dict entry outside an array") }
            guard structs < maxDepth else { throw .invalidArgs("structs nested deeper than \(maxDepth)") }
            guard index < bytes.count, basicCodes.contains(bytes[index]) else {
                throw .invalidArgs("dict entry key must be a basic type")
            }
            index += 1
            try parseOne(bytes, &index, arrays: arrays, structs: structs + 1, inArray: false)
            guard index < bytes.count, bytes[index] == UInt8(ascii: "}") else {
                throw .invalidArgs("dict entry must hold exactly a key and a value")
            }
            index += 1
        default:
            throw .invalidArgs("invalid type code '\(Character(Unicode.Scalar(code)))' in signature")
        }
    }
}

extension Signature: ExpressibleByStringLiteral {
    /// An invalid literal is a programming error, caught in debug builds
    /// (every test run). Release builds take it as written: a literal is read
    /// on every argument of every call, and parsing it there cost two
    /// allocations each time; sd-bus still refuses an invalid signature.
    public init(stringLiteral value: String) {
        assert((try? Self.parse(Array(value.utf8))) != nil, "invalid signature literal \(value)")
        self.init(trusted: value)
    }
}
