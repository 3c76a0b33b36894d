import TOMLKit

/// Checks made before toml++ (under TOMLKit) reads a file, for text it
/// asserts against instead of reporting: a debug build aborts on such text
/// and a release build assumes it away (undefined behaviour). config-fuzz
/// found each; each is refused with an error naming the line.
extension ConfigFile {
    /// Refuses a table header whose key begins with a character no key may
    /// begin with (`[[[a]]]`, `[=]`, a `[` alone on its line). Such a line is
    /// a header, and refused, only where toml++ would read
    /// one: where the text before it is a whole document, not the inside of
    /// an array or a multi-line string.
    static func checkTableHeaders(_ text: String, source: String) throws(ConfigurationError) {
        let lines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        for (index, line) in lines.enumerated() where beginsUnreadableHeader(line, isLast: index == lines.count - 1) {
            let before = String(decoding: text.utf8[..<line.startIndex], as: UTF8.self)
            if (try? TOMLTable(string: before)) != nil {
                throw ConfigurationError("\(source): line \(index + 1): a table header's name must begin with a letter, digit, '_', '-' or a quote")
            }
        }
    }

    /// Whether `line` opens a header whose name begins with what toml++ cannot read.
    private static func beginsUnreadableHeader(_ line: Substring.UTF8View, isLast: Bool) -> Bool {
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var rest = line.drop(while: isBlank)
        guard rest.first == UInt8(ascii: "[") else { return false }
        let afterBracket = rest.dropFirst().drop(while: isBlank)
        rest = afterBracket
        if rest.first == UInt8(ascii: "[") {
            // "[ [" is an error toml++ reports itself.
            guard line.drop(while: isBlank).dropFirst().first == UInt8(ascii: "[") else { return false }
            rest = rest.dropFirst().drop(while: isBlank)
        }
        // At the end of the text toml++ reports the header unfinished; before a newline it asserts.
        guard let first = rest.first else { return !isLast }
        let readable = Array("]\"'_-".utf8) + Array(UInt8(ascii: "a")...UInt8(ascii: "z"))
            + Array(UInt8(ascii: "A")...UInt8(ascii: "Z")) + Array(UInt8(ascii: "0")...UInt8(ascii: "9"))
        return !readable.contains(first)
    }
}

extension ConfigFile {
    /// Refuses a date-time whose time does not begin with a digit
    /// (`2020-01-01T:00`, `2020-01-01Tx`): toml++ reads the date, the `T`,
    /// then asserts the next character is a digit. Strings and comments are
    /// skipped, so such text inside them is kept; a bare key spelled that way
    /// is refused too, which costs nothing, as no program of ours knows one.
    static func checkDateTimes(_ text: String, source: String) throws(ConfigurationError) {
        let bytes = Array(text.utf8)
        var line = 1
        var index = 0
        func starts(with marker: String, at position: Int) -> Bool {
            let marker = Array(marker.utf8)
            return position + marker.count <= bytes.count && Array(bytes[position..<position + marker.count]) == marker
        }
        /// Moves `index` past the string or comment opening there, counting lines.
        func skip(until close: String, escapes: Bool, stopAtNewline: Bool) {
            while index < bytes.count {
                if escapes && bytes[index] == UInt8(ascii: "\\") {
                    // A backslash ending a line of a multi-line string escapes the newline.
                    if index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "\n") { line += 1 }
                    index += 2
                    continue
                }
                if bytes[index] == UInt8(ascii: "\n") {
                    if stopAtNewline { return }
                    line += 1
                }
                if starts(with: close, at: index) {
                    index += close.count
                    // A multi-line string may end with one or two of its quotes inside.
                    while close.count == 3 && index < bytes.count && bytes[index] == bytes[index - 1] { index += 1 }
                    return
                }
                index += 1
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "#"):
                skip(until: "\n", escapes: false, stopAtNewline: true)
            case UInt8(ascii: "\""), UInt8(ascii: "'"):
                let multiLine = starts(with: String(repeating: Character(Unicode.Scalar(byte)), count: 3), at: index)
                let close = String(repeating: Character(Unicode.Scalar(byte)), count: multiLine ? 3 : 1)
                index += close.count
                skip(until: close, escapes: byte == UInt8(ascii: "\""), stopAtNewline: !multiLine)
            case UInt8(ascii: "\n"):
                line += 1
                index += 1
            default:
                if beginsUnreadableDateTime(bytes, at: index) {
                    throw ConfigurationError("\(source): line \(line): a date-time's time must begin with a digit")
                }
                index += 1
            }
        }
    }

    /// Whether a bare word beginning at `index` is `YYYY-MM-DD` and a `T`
    /// followed by something other than a digit.
    private static func beginsUnreadableDateTime(_ bytes: [UInt8], at index: Int) -> Bool {
        func isDigit(_ position: Int) -> Bool {
            position < bytes.count && (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[position])
        }
        func isWordByte(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "+"):
                true
            default:
                false
            }
        }
        guard index == 0 || !isWordByte(bytes[index - 1]), index + 11 < bytes.count else { return false }
        let digits = [0, 1, 2, 3, 5, 6, 8, 9].allSatisfy { isDigit(index + $0) }
        let dashes = bytes[index + 4] == UInt8(ascii: "-") && bytes[index + 7] == UInt8(ascii: "-")
        let t = bytes[index + 10] | 0x20 == UInt8(ascii: "t")
        return digits && dashes && t && !isDigit(index + 11)
    }
}
