import NearbyCore
import Testing

/// The one rule for text that reaches storage, at its edges.
@Suite struct TextRuleTests {
    @Test(arguments: [
        ("plain ünïcödé ✓", TextRule.Kind.name, nil as String?),
        ("a\u{0}b", .name, "U+0000"),
        ("a\u{0}b", .freeText, "U+0000"),
        ("line\nbreak", .name, "U+000A"),
        ("line\nbreak\r\n\ttab", .freeText, nil),
        ("\u{1b}[2J", .freeText, "U+001B"),
        ("del\u{7f}", .freeText, "U+007F"),
        ("c1\u{85}", .freeText, "U+0085"),
        ("c1\u{9f}", .name, "U+009F"),
        ("after c1\u{a0}", .name, nil),
    ])
    func controlCharactersAreRefusedByName(text: String, kind: TextRule.Kind, refused: String?) {
        let problem = TextRule.problem(text, field: "field", kind)
        #expect(problem.map { $0.contains("field may not hold the control character \(refused ?? "?")") } ?? (refused == nil),
                "\(String(describing: problem))")
    }
}
