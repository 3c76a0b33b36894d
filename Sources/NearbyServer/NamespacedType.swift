import NearbyCore
import ServerAPI

/// An attachment's `NAMESPACE/TYPE`, or a pattern of them in a query, where
/// `*` stands for every namespace the caller owns or for every type.
struct NamespacedType: Equatable, Sendable {
    /// Nil: every namespace the caller owns.
    var namespace: String?
    /// Nil: every type.
    var type: String?

    /// Types are 1 to 100 characters (Unicode scalars).
    static let maxTypeLength = 100

    /// An attachment's own: `NAMESPACE/TYPE`, without wildcards.
    static func exact(_ text: String, field: String) throws(APIError) -> (namespace: String, type: String) {
        let (namespace, type) = try split(text, field: field, form: "NAMESPACE/TYPE")
        guard namespace != "*" else {
            throw APIError(.invalidArgument, "\(field) '\(text)' must name one namespace, not '*'")
        }
        try checkType(type, field: field, text: text)
        return (namespace, type)
    }

    /// A query: `*` (the same as `*/*`), `NAMESPACE/TYPE`, `NAMESPACE/*` or `*/TYPE`.
    static func pattern(_ text: String, field: String) throws(APIError) -> NamespacedType {
        if text == "*" { return NamespacedType() }
        let (namespace, type) = try split(text, field: field, form: "'*', NAMESPACE/TYPE or NAMESPACE/*")
        if type != "*" { try checkType(type, field: field, text: text) }
        return NamespacedType(namespace: namespace == "*" ? nil : namespace, type: type == "*" ? nil : type)
    }

    private static func split(_ text: String, field: String, form: String) throws(APIError) -> (String, String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw APIError(.invalidArgument, "\(field) '\(text)' must be \(form) (the type may not hold '/')")
        }
        // Neither engine is asked about a namespace it cannot hold (PostgreSQL's text takes no NUL).
        if let problem = TextRule.problem(parts[0], field: "\(field): the namespace", .name) {
            throw APIError(.invalidArgument, problem)
        }
        return (String(parts[0]), String(parts[1]))
    }

    private static func checkType(_ type: String, field: String, text: String) throws(APIError) {
        guard type.unicodeScalars.count <= maxTypeLength else {
            throw APIError(.invalidArgument, "\(field) '\(text)': the type is longer than \(maxTypeLength) characters")
        }
        guard !type.unicodeScalars.contains("*") else {
            throw APIError(.invalidArgument, "\(field) '\(text)': the type may not hold '*'")
        }
        if let problem = TextRule.problem(type, field: "\(field): the type", .name) { throw APIError(.invalidArgument, problem) }
    }

    /// Whether an attachment of `namespace` and `type` fits, `owned` being the
    /// namespaces the caller owns.
    func matches(namespace: String, type: String, owned: Set<String>) -> Bool {
        (self.namespace.map { $0 == namespace } ?? owned.contains(namespace)) && (self.type.map { $0 == type } ?? true)
    }
}
