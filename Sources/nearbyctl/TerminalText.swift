/// Text for the terminal: nearbyctl's own words as written, and every value
/// interpolated into them escaped by ``escaped(_:)``.
///
/// Message content and types, namespaces, app ids, upstream data and the
/// daemon's error messages come from other programs and other devices; written
/// raw, their control characters would drive the terminal (`ESC ] 0 ;` sets the
/// window title, `ESC [ 8 m` hides what follows, a newline forges a line). Every
/// human-readable line goes out as a `TerminalText`, so a value cannot reach the
/// terminal without passing through the one escaping function. JSON output
/// (`--json`) is not made of these: JSON encoding escapes control characters
/// itself, and scripts get the exact values.
struct TerminalText: Sendable, ExpressibleByStringInterpolation {
    /// What is written to the terminal.
    private(set) var rendered: String

    init(stringLiteral value: String) {
        rendered = value
    }

    init(stringInterpolation: StringInterpolation) {
        rendered = stringInterpolation.rendered
    }

    struct StringInterpolation: StringInterpolationProtocol {
        fileprivate var rendered = ""

        init(literalCapacity: Int, interpolationCount: Int) {
            rendered.reserveCapacity(literalCapacity)
        }

        /// nearbyctl's own words, as written.
        mutating func appendLiteral(_ literal: String) {
            rendered += literal
        }

        /// A value, shown by its description with control characters escaped.
        mutating func appendInterpolation(_ value: some CustomStringConvertible) {
            rendered += TerminalText.escaped(value.description)
        }

        /// Text already made for the terminal.
        mutating func appendInterpolation(_ text: TerminalText) {
            rendered += text.rendered
        }
    }

    static func + (lhs: TerminalText, rhs: TerminalText) -> TerminalText {
        var sum = lhs
        sum += rhs
        return sum
    }

    static func += (lhs: inout TerminalText, rhs: TerminalText) {
        lhs.rendered += rhs.rendered
    }

    /// `text` with every character that a terminal would act on instead of
    /// showing written as an escape: ESC as `\e`; newline, carriage return and
    /// tab as `\n`, `\r`, `\t`; the other C0 controls, DEL and the C1 controls
    /// as `\xNN` (the code point); and the invisible characters that reorder
    /// or break lines (bidirectional overrides and isolates, line and
    /// paragraph separators) as `\u{NNNN}`. Everything else is left as it is.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x1B: result += "\\e"
            case 0x0A: result += "\\n"
            case 0x0D: result += "\\r"
            case 0x09: result += "\\t"
            case 0x00...0x1F, 0x7F...0x9F: result += "\\x" + hex(scalar.value, digits: 2)
            case _ where needsEscape(scalar): result += "\\u{" + hex(scalar.value, digits: 4) + "}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        // Left-to-right and right-to-left marks, embeddings and overrides, isolates; line and paragraph separators.
        case 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: true
        default: false
        }
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

extension Array where Element == TerminalText {
    /// The texts one after another, `separator` between each two.
    func joined(separator: TerminalText) -> TerminalText {
        var result: TerminalText = ""
        for (index, text) in enumerated() {
            if index > 0 { result += separator }
            result += text
        }
        return result
    }
}
