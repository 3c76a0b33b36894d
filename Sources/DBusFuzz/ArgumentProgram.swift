import DBus

/// The fuzzer's bytes read as a program that appends a call's arguments:
/// typed, nested, possibly huge values, written straight into the message so
/// the harness never holds a huge value as a `DBusValue` (which costs a heap
/// box per byte). It reads 0 once the bytes run out, so every input is a
/// program.
///
/// A string is a length byte and that many bytes (ill-formed UTF-8
/// repaired, NULs and noncharacters dropped, as no bus carries them);
/// lengths 0xE0…0xFE name one of ``words`` instead, and 0xFF makes a huge
/// one: two bytes of size in KiB (32 MiB in all at most), then a fill byte.
/// A byte array is the same with bytes. An object path is a string whose
/// bytes pick its characters. Other arrays and dictionaries take a count
/// byte (at most 16, or 0xFF for 4096), fixed-size values their bytes
/// (big-endian). A variant's type comes from the program too
/// (``randomType(depth:)``: a byte per type code).
struct ArgumentProgram {
    /// Names nearbyd's readers know, so that mutations reach past the "unknown key" check.
    static let words = [
        "AppId", "Strategy", "Mediums", "Mode", "TTL", "Distance", "AllowInBackground", "Namespace", "Type", "DeviceTypes",
        "BeaconStrategy", "PermissionRequestHandler", "User", "DebugLogging", "MicrophoneUsageDescription",
        "BluetoothUsageDescription", "IncludeIBeacons", "LowPowerPreferred", "RawBeacons", "ble", "audio", "broadcast", "scan",
        "both", "earshot", "default", "ble-beacon", "nearby", "project@nearby.local",
    ]
    /// Values appended at most, so one input stays quick whatever it asks.
    static let maximumValues = 20_000
    /// Containers nested at most (the D-Bus limit is 64 in all).
    static let maximumDepth = 48
    /// Huge strings and byte arrays together, in one message: about the most
    /// the system bus carries in one (dbus-daemon's default max_message_size).
    static let maximumHugeBytes = 32 << 20

    private var bytes: ArraySlice<UInt8>
    private(set) var values = 0
    private var hugeBytes = 0
    /// Whether every value also went into ``mirror``'s values (no huge ones,
    /// nothing cut short by the value budget).
    private(set) var mirrored = true

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    mutating func byte() -> UInt8 {
        bytes.popFirst() ?? 0
    }

    /// Appends one value of `type` (one complete type); returns it unless it was too large to keep.
    @BusActor mutating func append(_ type: WireType, to writer: MessageWriter, depth: Int = 0) throws(DBusError) -> DBusValue? {
        values += 1
        switch type {
        case .basic(let code):
            return try appendBasic(code, to: writer)
        case .variant:
            let inner = depth < Self.maximumDepth ? randomType(depth: depth + 1) : .basic(UInt8(ascii: "u"))
            var value: DBusValue?
            try writer.appendContainer(.variant, inner.text) { () throws(DBusError) in
                value = try append(inner, to: writer, depth: depth + 1)
            }
            return value.map(DBusValue.variant)
        case .structure(let members):
            var kept: [DBusValue] = []
            try writer.appendContainer(.structure, members.map(\.text).joined()) { () throws(DBusError) in
                for member in members { if let value = try append(member, to: writer, depth: depth + 1) { kept.append(value) } }
            }
            return kept.count == members.count ? .structure(kept) : nil
        case .array(.basic(UInt8(ascii: "y"))):
            let blob = self.blob()
            try writer.append(blob.bytes)
            if blob.huge { mirrored = false }
            return blob.huge ? nil : .bytes(blob.bytes)
        case .array(let element):
            let count = self.count()
            var kept: [DBusValue] = []
            try writer.appendContainer(.array, element.text) { () throws(DBusError) in
                for _ in 0..<count where values < Self.maximumValues {
                    if let value = try append(element, to: writer, depth: depth + 1) { kept.append(value) }
                }
            }
            return .array(element: element.signature, kept)
        case .dictionary(let key, let value):
            let count = self.count()
            var kept: [DictEntry] = []
            try writer.appendContainer(.array, WireType.dictionaryEntry(key, value).text) { () throws(DBusError) in
                for _ in 0..<count where values < Self.maximumValues {
                    var pair: (DBusValue?, DBusValue?)
                    try writer.appendContainer(.dictEntry, WireType.basic(key).text + value.text) { () throws(DBusError) in
                        pair = (try appendBasic(key, to: writer), try append(value, to: writer, depth: depth + 1))
                    }
                    if let k = pair.0, let v = pair.1 { kept.append(DictEntry(k, v)) }
                }
            }
            return .dictionary(key: WireType.basic(key).signature, value: value.signature, kept)
        case .dictionaryEntry:
            fatalError("a dict entry is only an array's element")
        }
    }

    @BusActor private mutating func appendBasic(_ code: UInt8, to writer: MessageWriter) throws(DBusError) -> DBusValue? {
        func fixed<T: FixedWidthInteger>(_: T.Type) -> T {
            (0..<MemoryLayout<T>.size).reduce(T.zero) { value, _ in value << 8 | T(truncatingIfNeeded: byte()) }
        }
        let value: DBusValue
        switch code {
        case UInt8(ascii: "y"): value = .byte(byte())
        case UInt8(ascii: "b"): value = .bool(byte() & 1 == 1)
        case UInt8(ascii: "n"): value = .int16(fixed(Int16.self))
        case UInt8(ascii: "q"): value = .uint16(fixed(UInt16.self))
        case UInt8(ascii: "i"): value = .int32(fixed(Int32.self))
        case UInt8(ascii: "u"): value = .uint32(fixed(UInt32.self))
        case UInt8(ascii: "x"): value = .int64(fixed(Int64.self))
        case UInt8(ascii: "t"): value = .uint64(fixed(UInt64.self))
        case UInt8(ascii: "d"): value = .double(Double(bitPattern: fixed(UInt64.self)))
        case UInt8(ascii: "o"):
            // Path elements of letters: what the text's bytes say, within the rules.
            // At most 64 KiB with its leading '/' (sd-bus refuses longer paths to the writer; the
            // readers refuse a path past 4 KiB), and building a huge one byte by byte would cost
            // the harness seconds.
            let text = string()
            let elements = text.text.utf8.prefix(Self.maximumPathBytes - 1).split(separator: UInt8(ascii: "/")).map { element in
                String(decoding: element.map { Self.pathAlphabet[Int($0) % Self.pathAlphabet.count] }, as: UTF8.self)
            }
            let path = ObjectPath(trustedElements: elements)
            if text.huge { mirrored = false }
            try writer.append(path)
            return text.huge ? nil : .objectPath(path)
        case UInt8(ascii: "g"):
            var room = Self.maximumSignatureBytes
            let types = (0..<Int(byte() % 4)).map { _ in randomType(depth: 0, nesting: 0, room: &room) }
            value = .signature(Signature(trustedMembers: types))
        default:
            let text = string()
            try writer.append(text.text)
            if text.huge { mirrored = false }
            return text.huge ? nil : .string(text.text)
        }
        try writer.append(value)
        return value
    }

    /// The longest object path sd-bus appends.
    static let maximumPathBytes = 64 << 10
    private static let pathAlphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_".utf8)

    private mutating func count() -> Int {
        let count = byte()
        return count == 0xFF ? 4096 : Int(count % 17)
    }

    private mutating func string() -> (text: String, huge: Bool) {
        let length = byte()
        if (0xE0...0xFE).contains(length) { return (Self.words[Int(length - 0xE0) % Self.words.count], false) }
        if length == 0xFF {
            let (size, fill) = hugeSize()
            return (String(decoding: [UInt8](repeating: 0x20 + fill % 0x5F, count: size), as: UTF8.self), true)
        }
        let text = String(decoding: (0..<length).map { _ in byte() }, as: UTF8.self)
        // What sd-bus (and libdbus) take as a string: no NUL, no noncharacters.
        var kept = String.UnicodeScalarView()
        kept.append(contentsOf: text.unicodeScalars.filter { scalar in
            scalar.value != 0 && !(0xFDD0...0xFDEF).contains(scalar.value) && scalar.value & 0xFFFE != 0xFFFE
        })
        return (String(kept), false)
    }

    private mutating func blob() -> (bytes: [UInt8], huge: Bool) {
        let length = byte()
        if (0xE0...0xFE).contains(length) { return (Array(Self.words[Int(length - 0xE0) % Self.words.count].utf8), false) }
        if length == 0xFF {
            let (size, fill) = hugeSize()
            return ([UInt8](repeating: fill, count: size), true)
        }
        return ((0..<length).map { _ in byte() }, false)
    }

    private mutating func hugeSize() -> (Int, UInt8) {
        let kib = Int(byte()) << 8 | Int(byte())
        let size = min(kib << 10, Self.maximumHugeBytes - hugeBytes)
        hugeBytes += size
        return (size, byte())
    }

    /// Any complete type but a file descriptor (which a detached message
    /// cannot carry), nested at most ``maximumTypeDepth`` deep below `depth`
    /// and with a signature of at most ``maximumSignatureBytes`` (D-Bus's
    /// limits are 32 and 255).
    mutating func randomType(depth: Int) -> WireType {
        var room = Self.maximumSignatureBytes
        return randomType(depth: depth, nesting: 0, room: &room)
    }

    static let maximumTypeDepth = 24
    static let maximumSignatureBytes = 200

    private mutating func randomType(depth: Int, nesting: Int, room: inout Int) -> WireType {
        let code = Self.typeCodes[Int(byte()) % Self.typeCodes.count]
        guard depth < Self.maximumDepth, nesting < Self.maximumTypeDepth, room > 8 else { return .basic(UInt8(ascii: "s")) }
        room -= 1
        switch code {
        case UInt8(ascii: "a"): return .array(randomType(depth: depth + 1, nesting: nesting + 1, room: &room))
        case UInt8(ascii: "{"):
            room -= 3
            let key = Self.basicCodes[Int(byte()) % Self.basicCodes.count]
            return .dictionary(key: key, value: randomType(depth: depth + 2, nesting: nesting + 2, room: &room))
        case UInt8(ascii: "("):
            room -= 1
            return .structure((0...Int(byte() % 3)).map { _ in randomType(depth: depth + 1, nesting: nesting + 1, room: &room) })
        case UInt8(ascii: "v"): return .variant
        default: return .basic(code)
        }
    }

    static let basicCodes = Array("ybnqiuxtdsog".utf8)
    private static let typeCodes = Array("ybnqiuxtdsogva{(sva".utf8)
}

/// A complete D-Bus type, parsed or made up by a program.
indirect enum WireType: Equatable {
    case basic(UInt8)
    case variant
    case array(WireType)
    case dictionary(key: UInt8, value: WireType)
    /// Only as a dictionary's element, for its signature.
    case dictionaryEntry(UInt8, WireType)
    case structure([WireType])

    var signature: Signature { Signature(trustedMembers: [self]) }

    var text: String {
        switch self {
        case .basic(let code): String(Unicode.Scalar(code))
        case .variant: "v"
        case .array(let element): "a" + element.text
        case .dictionary(let key, let value): "a{" + String(Unicode.Scalar(key)) + value.text + "}"
        case .dictionaryEntry(let key, let value): "{" + String(Unicode.Scalar(key)) + value.text + "}"
        case .structure(let members): "(" + members.map(\.text).joined() + ")"
        }
    }

    /// The complete types of a valid signature, in order.
    static func parse(_ signature: Signature) -> [WireType] {
        var bytes = Array(signature.rawValue.utf8)[...]
        var types: [WireType] = []
        while !bytes.isEmpty { types.append(parseOne(&bytes)) }
        return types
    }

    private static func parseOne(_ bytes: inout ArraySlice<UInt8>) -> WireType {
        let code = bytes.popFirst()!
        switch code {
        case UInt8(ascii: "v"): return .variant
        case UInt8(ascii: "a"):
            guard bytes.first == UInt8(ascii: "{") else { return .array(parseOne(&bytes)) }
            bytes.removeFirst()
            let key = bytes.popFirst()!
            let value = parseOne(&bytes)
            bytes.removeFirst() // }
            return .dictionary(key: key, value: value)
        case UInt8(ascii: "("):
            var members: [WireType] = []
            while bytes.first != UInt8(ascii: ")") { members.append(parseOne(&bytes)) }
            bytes.removeFirst()
            return .structure(members)
        default: return .basic(code)
        }
    }
}

extension Signature {
    /// The signature of `types` in order; a program only makes valid ones.
    init(trustedMembers types: [WireType]) {
        // Checked: a program's types nest within the limits it keeps.
        do { try self.init(types.map(\.text).joined()) } catch { fatalError("the program made a bad signature: \(error)") }
    }
}

extension ObjectPath {
    /// `/` and the elements, which are made of valid characters.
    init(trustedElements elements: [String]) {
        let path = "/" + elements.filter { !$0.isEmpty }.joined(separator: "/")
        do { try self.init(path) } catch { fatalError("the program made a bad path \(path)") }
    }
}
