/// One node of an element's content: a child element or character data.
public enum XMLNode: Sendable, Equatable {
    case element(XMLElement)
    case text(String)
}

/// A minimal XML element tree, as XMPP stanzas need: namespaced names, attributes
/// and mixed content. No comments, processing instructions or entities: XMPP
/// forbids them (RFC 6120 §11.1).
public struct XMLElement: Sendable, Equatable {
    /// The local name, without prefix.
    public var name: String
    /// The namespace URI; `nil` means "the parent's default namespace" (for a
    /// stanza, the stream's `jabber:client`). Parsed elements always carry theirs.
    public var namespace: String?
    /// Attributes without namespace by local name; `xml:lang` and other
    /// attributes in the XML namespace as `xml:NAME`.
    public var attributes: [String: String]
    public var children: [XMLNode]

    public init(_ name: String, namespace: String? = nil, attributes: [String: String] = [:],
                children: [XMLNode] = []) {
        self.name = name
        self.namespace = namespace
        self.attributes = attributes
        self.children = children
    }

    /// An element whose only content is `text`.
    public init(_ name: String, namespace: String? = nil, attributes: [String: String] = [:], text: String) {
        self.init(name, namespace: namespace, attributes: attributes, children: [.text(text)])
    }

    /// An element whose content is `elements`.
    public init(_ name: String, namespace: String? = nil, attributes: [String: String] = [:],
                elements: [XMLElement]) {
        self.init(name, namespace: namespace, attributes: attributes, children: elements.map { .element($0) })
    }

    /// The character data directly in this element, concatenated (not that of
    /// descendants).
    public var text: String {
        var result = ""
        for case .text(let text) in children { result += text }
        return result
    }

    /// The child elements, in order.
    public var elements: [XMLElement] {
        children.compactMap { if case .element(let element) = $0 { element } else { nil } }
    }

    /// The first child element called `name`, in `namespace` if one is given.
    public func child(named name: String, namespace: String? = nil) -> XMLElement? {
        elements.first { $0.name == name && (namespace == nil || $0.namespace == namespace) }
    }

    public subscript(attribute: String) -> String? {
        get { attributes[attribute] }
        set { attributes[attribute] = newValue }
    }

    /// The element serialized as it stands on its own: `xmlns` is emitted
    /// wherever an element's namespace differs from its parent's.
    public var xml: String { xml(inheriting: nil) }

    /// The element serialized inside a parent whose default namespace is
    /// `inherited` (a stanza inside the stream: `jabber:client`).
    public func xml(inheriting inherited: String?) -> String {
        var out = ""
        write(to: &out, inherited: inherited)
        return out
    }

    private func write(to out: inout String, inherited: String?) {
        out += "<" + name
        let own = namespace ?? inherited
        if let own, own != inherited {
            out += " xmlns='"
            XMLEscaping.appendAttribute(own, to: &out)
            out += "'"
        }
        // Sorted, so that the same element always serializes the same way.
        for (key, value) in attributes.sorted(by: { $0.key < $1.key }) {
            out += " " + key + "='"
            XMLEscaping.appendAttribute(value, to: &out)
            out += "'"
        }
        if children.isEmpty {
            out += "/>"
            return
        }
        out += ">"
        for child in children {
            switch child {
            case .element(let element): element.write(to: &out, inherited: own)
            case .text(let text): XMLEscaping.appendText(text, to: &out)
            }
        }
        out += "</" + name + ">"
    }
}

/// Escaping of character data and attribute values for XML 1.0.
enum XMLEscaping {
    static func appendText(_ text: String, to out: inout String) {
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            // A literal CR would be normalized to LF by the reader.
            case "\r": out += "&#13;"
            default: appendChecked(scalar, to: &out)
            }
        }
    }

    static func attribute(_ value: String) -> String {
        var out = ""
        appendAttribute(value, to: &out)
        return out
    }

    static func appendAttribute(_ value: String, to out: inout String) {
        for scalar in value.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            // Literal whitespace other than space would be normalized to a space.
            case "\t": out += "&#9;"
            case "\n": out += "&#10;"
            case "\r": out += "&#13;"
            default: appendChecked(scalar, to: &out)
            }
        }
    }

    /// Characters XML 1.0 cannot carry at all (most C0 controls, U+FFFE,
    /// U+FFFF) become U+FFFD rather than making the stream ill-formed.
    private static func appendChecked(_ scalar: Unicode.Scalar, to out: inout String) {
        let value = scalar.value
        if (value < 0x20 && value != 0x9 && value != 0xA && value != 0xD) || value == 0xFFFE || value == 0xFFFF {
            out.unicodeScalars.append("\u{FFFD}")
        } else {
            out.unicodeScalars.append(scalar)
        }
    }
}
