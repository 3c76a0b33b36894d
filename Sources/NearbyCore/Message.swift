/// A published message as subscribers see it: identified by namespace, type and
/// content together ("found once while any source of it is near").
public struct Message: Hashable, Sendable, Codable {
    public var namespace: String
    public var type: String
    public var content: [UInt8]

    public init(namespace: String, type: String, content: [UInt8]) {
        self.namespace = namespace
        self.type = type
        self.content = content
    }
}

/// The rules every message and filter obeys, checked before anything else.
public enum MessageRules {
    public static let maximumContentBytes = 102_400
    public static let maximumTypeLength = 32
    public static let maximumNamespaceLength = 64
    /// Namespaces starting with this are reserved for the system (raw beacon sightings).
    public static let reservedPrefix = "__"

    public static func checkContent(_ content: [UInt8]) throws(NearbyError) {
        guard !content.isEmpty else { throw .invalidArguments("content is empty; a message carries 1..\(maximumContentBytes) bytes") }
        guard content.count <= maximumContentBytes else {
            throw .invalidArguments("content is \(content.count) bytes; the maximum is \(maximumContentBytes)")
        }
    }

    /// A type: at most 32 characters, no `*`, no control characters. Empty is
    /// the default type (and, in a subscription, every type of the namespace).
    public static func checkType(_ type: String) throws(NearbyError) {
        // One pass: this runs for every Publish and Subscribe.
        var count = 0
        for scalar in type.unicodeScalars {
            count += 1
            if scalar == "*" { throw .invalidArguments("type must not contain '*'") }
            if TextRule.refuses(scalar, .name) {
                throw .invalidArguments("type must not contain control characters")
            }
        }
        guard count <= maximumTypeLength else {
            throw .invalidArguments("type is \(count) characters; the maximum is \(maximumTypeLength)")
        }
    }

    /// A namespace: empty (the project's own), or 1..64 of `A-Z a-z 0-9 . _ -`,
    /// not starting with the reserved `__`.
    public static func checkNamespace(_ namespace: String) throws(NearbyError) {
        guard !namespace.isEmpty else { return }
        guard namespace.utf8.count <= maximumNamespaceLength else {
            throw .invalidArguments("namespace is longer than \(maximumNamespaceLength) characters")
        }
        guard namespace.utf8.allSatisfy(isIdentifierByte) else {
            throw .invalidArguments("namespace '\(namespace)' may only hold letters, digits, '.', '_' and '-'")
        }
        guard !namespace.hasPrefix(reservedPrefix) else {
            throw .invalidArguments("namespaces starting with '\(reservedPrefix)' are reserved")
        }
    }

    /// The bytes namespaces and ids are made of: ASCII letters, digits, `.`, `_`, `-`.
    public static func isIdentifierByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }
}

/// What a subscription wants: a namespace (empty: the project's own) and a type
/// (empty: every type of the namespace).
public struct MessageFilter: Hashable, Sendable, Codable {
    public var namespace: String
    public var type: String

    public init(namespace: String = "", type: String = "") {
        self.namespace = namespace
        self.type = type
    }

    /// Whether a message in `namespace` of `type` passes, with `projectNamespace`
    /// standing in for empty namespaces on either side.
    public func matches(namespace messageNamespace: String, type messageType: String,
                        projectNamespace: String) -> Bool {
        let wanted = namespace.isEmpty ? projectNamespace : namespace
        let actual = messageNamespace.isEmpty ? projectNamespace : messageNamespace
        return wanted == actual && (type.isEmpty || type == messageType)
    }
}
