import Foundation
import GRDB
import NIOCore
import PostgresNIO

/// One column's value on its way from SQLite to PostgreSQL, in the type
/// PostgreSQL's column has.
enum MigratedValue: Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)
    case boolean(Bool)

    /// Reads SQLite's value as `kind`; throws ``CorruptRow`` for a value this
    /// server never writes there (text in an integer column, say).
    init(_ value: DatabaseValue, kind: MigratedTable.Kind, table: String, column: String) throws {
        switch (value.storage, kind) {
        case (.null, _): self = .null
        case (.int64(let integer), .integer): self = .integer(integer)
        case (.int64(let integer), .boolean): self = .boolean(integer != 0)
        // REAL affinity may keep a whole number as an integer.
        case (.int64(let integer), .real): self = .real(Double(integer))
        case (.double(let real), .real): self = .real(real)
        case (.string(let text), .text): self = .text(text)
        case (.blob(let data), .blob): self = .blob(data)
        default: throw CorruptRow("\(table).\(column) holds \(value) where \(kind) is expected")
        }
    }

    /// Roughly what it takes in memory and on the wire, to bound a batch.
    var size: Int {
        switch self {
        case .text(let text): text.utf8.count
        case .blob(let data): data.count
        case .null, .integer, .real, .boolean: 8
        }
    }

    /// Appends the value as a bound parameter. A NULL goes untyped: in an
    /// INSERT's VALUES, PostgreSQL takes the column's type.
    func bind(into bindings: inout PostgresBindings) {
        switch self {
        case .null: bindings.appendNull()
        case .integer(let integer): bindings.append(integer)
        case .real(let real): bindings.append(real)
        case .text(let text): bindings.append(text)
        case .blob(let data): bindings.append(ByteBuffer(bytes: data))
        case .boolean(let boolean): bindings.append(boolean)
        }
    }
}
