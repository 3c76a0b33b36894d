import DBus
import Testing

/// Messages built in-process, without a bus: what tests and dbus-fuzz read
/// arguments from.
@Suite(.timeLimit(.minutes(1))) struct DetachedMessageTests {
    @BusActor private static func message(_ values: [DBusValue]) throws -> DetachedMessage {
        let message = try DetachedMessage()
        try message.append { writer throws(DBusError) in
            for value in values { try writer.append(value) }
        }
        return message
    }

    @Test @BusActor func everyTypeReadsBackAsAppended() throws {
        let message = try Self.message(BusTests.samples)
        try message.read { reader throws(DBusError) in
            #expect(reader.signature.rawValue == BusTests.samples.map(\.signature.rawValue).joined())
            #expect(try reader.readAll() == BusTests.samples)
            #expect(reader.isAtEnd)
        }
    }

    @Test @BusActor func eachReadStartsAtTheFirstArgument() throws {
        let message = try Self.message([.string("first"), .uint32(2)])
        #expect(try message.read { reader throws(DBusError) in try reader.read(String.self) } == "first")
        #expect(try message.read { reader throws(DBusError) in try reader.read(String.self) } == "first")
    }

    @Test @BusActor func nothingIsAppendedOnceRead() throws {
        let message = try Self.message([.string("only")])
        try message.read { _ throws(DBusError) in }
        #expect(throws: DBusError.self) { try message.append { writer throws(DBusError) in try writer.append("more") } }
        #expect(try message.read { reader throws(DBusError) in try reader.readAll() } == [.string("only")])
    }

    @Test @BusActor func anUnclosedContainerIsNotSealed() throws {
        let message = try DetachedMessage()
        #expect(throws: DBusError.self) {
            try message.append { writer throws(DBusError) in
                try writer.appendContainer(.array, "s") { () throws(DBusError) in
                    try writer.append(UInt32(1)) // not a string: sd-bus refuses it inside "as"
                }
            }
        }
        #expect(throws: DBusError.self) { try message.read { _ throws(DBusError) in } }
    }

    @Test @BusActor func containersAreStreamed() throws {
        let message = try DetachedMessage()
        try message.append { writer throws(DBusError) in
            try writer.appendContainer(.array, "{sv}") { () throws(DBusError) in
                try writer.appendContainer(.dictEntry, "sv") { () throws(DBusError) in
                    try writer.append("Blob")
                    try writer.appendContainer(.variant, "ay") { () throws(DBusError) in try writer.append([UInt8](repeating: 7, count: 3)) }
                }
            }
            try writer.appendContainer(.structure, "is") { () throws(DBusError) in
                try writer.append(Int32(-1))
                try writer.append("x")
            }
        }
        #expect(try message.read { reader throws(DBusError) in try reader.readAll() } == [
            .vardict(["Blob": .bytes([7, 7, 7])]), .structure([.int32(-1), .string("x")]),
        ])
    }

    @Test @BusActor func aStringWithNULIsRefusedWhateverItsSize() throws {
        let message = try DetachedMessage()
        for text in ["a\0b", String(repeating: "x", count: 1 << 20) + "\0"] {
            #expect(throws: DBusError.invalidArgs("strings cannot contain NUL")) {
                try message.append { writer throws(DBusError) in try writer.append(text) }
            }
        }
        try message.append { writer throws(DBusError) in try writer.append(String(repeating: "x", count: 1 << 20)) }
        #expect(try message.read { reader throws(DBusError) in try reader.read(String.self) }.utf8.count == 1 << 20)
    }

    // The bounded reads nearbyd's arguments go through, at their edges.

    @Test @BusActor func stringsAreBoundedInPlace() throws {
        let message = try Self.message([.string(String(repeating: "é", count: 8))]) // 16 bytes
        #expect(try message.read { reader throws(DBusError) in try reader.readString(maxBytes: 16, "text") }
                == String(repeating: "é", count: 8))
        #expect(throws: DBusError.invalidArgs("text is longer than 15 bytes")) {
            try message.read { reader throws(DBusError) in try reader.readString(maxBytes: 15, "text") }
        }
    }

    @Test @BusActor func byteArraysAreBoundedInPlace() throws {
        let size = 30 << 20
        let message = try DetachedMessage()
        try message.append { writer throws(DBusError) in try writer.append([UInt8](repeating: 1, count: size)) }
        #expect(try message.read { reader throws(DBusError) in try reader.readBytes(maxCount: size, "content") }.count == size)
        #expect(throws: DBusError.invalidArgs("content is \(size) bytes; at most \(size - 1) are allowed")) {
            try message.read { reader throws(DBusError) in try reader.readBytes(maxCount: size - 1, "content") }
        }
    }

    @Test @BusActor func entriesAreBoundedInCountAndKeys() throws {
        let message = try Self.message([.vardict(["a": .bool(true), "bb": .bool(false)])])
        func read(maxEntries: Int, maxKeyBytes: Int) throws -> [String] {
            try message.read { reader throws(DBusError) in
                var keys: [String] = []
                try reader.readEntries(value: "v", maxEntries: maxEntries, maxKeyBytes: maxKeyBytes, "params") { key throws(DBusError) in
                    keys.append(key)
                    _ = try reader.readValue()
                }
                return keys
            }
        }
        #expect(try read(maxEntries: 2, maxKeyBytes: 2) == ["a", "bb"])
        #expect(throws: DBusError.invalidArgs("params has more than 1 entries")) { try read(maxEntries: 1, maxKeyBytes: 2) }
        #expect(throws: DBusError.invalidArgs("a key of params is longer than 1 bytes")) { try read(maxEntries: 2, maxKeyBytes: 1) }
    }

    /// Byte arrays and dictionaries are entered without a look first; what
    /// is not one, or is not there, is still refused with its type named.
    @Test @BusActor func anArrayOfAnotherTypeOrNoneIsRefusedByName() throws {
        let text = try Self.message([.string("not bytes"), .dictionary(key: "s", value: "s", [DictEntry(.string("k"), .string("v"))])])
        #expect(throws: DBusError.invalidArgs("expected a value of type 'ay', found 's'")) {
            try text.read { reader throws(DBusError) in try reader.readBytes(maxCount: 10, "content") }
        }
        #expect(throws: DBusError.invalidArgs("expected a value of type 'a{sv}', found 's'")) {
            try text.read { reader throws(DBusError) in try reader.readEntries(value: "v", maxEntries: 2, maxKeyBytes: 2, "params") { _ in } }
        }
        #expect(throws: DBusError.invalidArgs("expected a value of type 'a{sv}', found 'a{ss}'")) {
            try text.read { reader throws(DBusError) in
                _ = try reader.readString(maxBytes: 10, "text")
                try reader.readEntries(value: "v", maxEntries: 2, maxKeyBytes: 2, "params") { _ in }
            }
        }
        let empty = try DetachedMessage()
        try empty.append { _ throws(DBusError) in }
        #expect(throws: DBusError.invalidArgs("message has fewer arguments than expected")) {
            try empty.read { reader throws(DBusError) in try reader.readBytes(maxCount: 10, "content") }
        }
    }

    @Test @BusActor func budgetsBoundNesting() throws {
        func nested(_ depth: Int) -> DBusValue {
            (0..<depth).reduce(DBusValue.uint32(1)) { inner, _ in .variant(inner) }
        }
        func read(_ value: DBusValue) throws -> DBusValue {
            try Self.message([value]).read { reader throws(DBusError) in
                var budget = ReadBudget(values: 100, bytes: 100, depth: 7, what: "value")
                return try reader.readValue(within: &budget)
            }
        }
        // Six variants around a number: seven values, the last at depth 7.
        #expect(try read(nested(6)) == nested(6))
        #expect(throws: DBusError.invalidArgs("value is nested too deeply")) { try read(nested(7)) }
    }

    @Test @BusActor func budgetsBoundValuesAndBytes() throws {
        func read(_ value: DBusValue) throws -> DBusValue {
            try Self.message([value]).read { reader throws(DBusError) in
                var budget = ReadBudget(values: 100, bytes: 99, depth: 2, what: "value")
                return try reader.readValue(within: &budget)
            }
        }
        #expect(try read(.bytes([UInt8](repeating: 0, count: 99))) == .bytes([UInt8](repeating: 0, count: 99)))
        #expect(throws: DBusError.invalidArgs("value is 100 bytes; at most 99 are allowed")) {
            try read(.bytes([UInt8](repeating: 0, count: 100)))
        }
    }
}
