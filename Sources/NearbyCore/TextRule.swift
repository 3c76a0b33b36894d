/// The one rule for text from outside that names or describes something (a
/// message's type, a request body, a query, a stanza): no NUL, which
/// PostgreSQL's text cannot hold while SQLite's can (so the engines would
/// answer the same request apart: one a 500), and no other control character
/// (U+0001–U+001F, U+007F–U+009F), which logs, terminals and payloads would
/// carry on. Free text (a description, a property's value) may hold line
/// breaks and tabs.
public enum TextRule {
    public enum Kind: Sendable {
        /// A name, an id, a type, a key: no control character at all.
        case name
        /// Prose: line feed, carriage return and tab, but no other control character.
        case freeText
    }

    /// The first character the rule refuses in `text`, or nil when it takes it.
    public static func refused(in text: some StringProtocol, _ kind: Kind) -> Unicode.Scalar? {
        text.unicodeScalars.first { refuses($0, kind) }
    }

    /// Whether the rule refuses `scalar` in text of `kind`.
    @inlinable
    public static func refuses(_ scalar: Unicode.Scalar, _ kind: Kind) -> Bool {
        // The control characters (general category Cc) are exactly these two ranges.
        guard scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) else { return false }
        return kind == .name || !(scalar == "\n" || scalar == "\r" || scalar == "\t")
    }

    /// Why `field` is refused, in the API's words; nil when the rule takes it.
    public static func problem(_ text: some StringProtocol, field: String, _ kind: Kind) -> String? {
        guard let scalar = refused(in: text, kind) else { return nil }
        let hex = String(scalar.value, radix: 16, uppercase: true)
        let code = "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        return "\(field) may not hold the control character \(code)" + (kind == .freeText ? " (only line breaks and tabs)" : "")
    }
}
