import TOMLKit

extension ConfigFile {
    /// Refuses a table header whose key begins with a character no key may
    /// begin with (`[[[a]]]`, `[=]`, a `[` alone on its line), which toml++
    /// (under TOMLKit) asserts against instead of reporting: a debug build
    /// aborts on it and a release build assumes it away (config-fuzz found
    /// it). Such a line is a header, and refused, only where toml++ would read
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
