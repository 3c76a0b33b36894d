import CLibXML2
#if canImport(Glibc)
import Glibc
#endif

/// The opening tag of an XML stream (`<stream:stream …>`).
public struct XMLStreamHeader: Sendable, Equatable {
    /// The root element's local name (`stream`) and namespace URI.
    public var name: String
    public var namespace: String?
    /// Attributes without namespace by local name, `xml:lang` as such.
    public var attributes: [String: String]
    /// Namespaces the tag declares, by prefix; the default namespace under "".
    public var namespaceDeclarations: [String: String]
}

/// What an XML stream yields as bytes arrive.
public enum XMLStreamEvent: Sendable, Equatable {
    /// The root element opened.
    case streamOpened(XMLStreamHeader)
    /// A complete child of the root element (a stanza or a negotiation element).
    case stanza(XMLElement)
    /// The root element closed (`</stream:stream>`).
    case streamClosed
}

/// Why an XML stream cannot go on; each maps to the stream error to send.
public enum XMLStreamParserError: Error, Sendable, Equatable {
    /// Not XML 1.0 (libxml2's message).
    case notWellFormed(String)
    /// XML that XMPP forbids (RFC 6120 §11.1): a DTD, a comment, a processing
    /// instruction or an entity reference other than the five predefined ones.
    case restrictedXML(String)
    /// A stanza (or the stream header) longer than the limit, in bytes.
    case stanzaTooLarge(limit: Int)
    /// Elements nested deeper than the limit (the stream root is depth 1).
    case nestedTooDeep(limit: Int)
    /// An element or attribute name with an undeclared namespace prefix.
    case undeclaredPrefix(String)
    /// Character data other than whitespace between stanzas.
    case textOutsideStanza
    /// The stream is not UTF-8 (RFC 6120 §11.6).
    case unsupportedEncoding

    /// The stream error condition to answer with.
    public var streamError: StreamError {
        switch self {
        case .notWellFormed: .notWellFormed
        case .restrictedXML: .restrictedXML
        case .stanzaTooLarge, .nestedTooDeep: .policyViolation
        case .undeclaredPrefix: .badNamespacePrefix
        case .textOutsideStanza: .badFormat
        case .unsupportedEncoding: .unsupportedEncoding
        }
    }
}

/// An incremental parser of one XML stream, on libxml2's SAX2 push parser: fed
/// byte chunks split anywhere (inside a tag, inside a UTF-8 sequence), it yields
/// the stream's header, each complete depth-1 child as an ``XMLElement``, and
/// the stream's end.
///
/// Nothing is ever fetched or expanded: entity substitution, DTD loading and
/// network access stay off, and the first DTD, comment, processing instruction
/// or non-predefined entity reference stops the parser with
/// ``XMLStreamParserError/restrictedXML(_:)``. After an error, every later
/// call reports it again.
///
/// Not thread-safe and not `Sendable`: a parser belongs to one connection and is
/// used only on that connection's event loop.
public final class XMLStreamParser {
    /// Bytes one stanza may take on the wire, counted from the end of whatever
    /// came before it at the stream level; the stream header counts the same way.
    public let maximumStanzaBytes: Int
    /// Element depth, the stream root being 1 and a stanza 2.
    public let maximumDepth: Int

    private var context: xmlParserCtxtPtr?
    private var events: [XMLStreamEvent] = []
    private var failure: XMLStreamParserError?
    /// The elements of the stanza being read, outermost first.
    private var open: [XMLElement] = []
    /// Character data of the innermost open element not yet added to it, kept as
    /// bytes until the next tag so that it is decoded whole.
    private var text: [UInt8] = []
    private var depth = 0
    /// Bytes handed to libxml2 so far.
    private var fed = 0
    /// Where in the input (bytes) the current stanza may start: the end of the
    /// last stream-level item.
    private var boundary = 0

    /// Bytes handed to libxml2 at once, so that no stanza is read far past its
    /// limit before the limit is checked.
    private static let slice = 4096

    public init(maximumStanzaBytes: Int = 65536, maximumDepth: Int = 32) {
        Self.initializeLibrary
        self.maximumStanzaBytes = maximumStanzaBytes
        self.maximumDepth = maximumDepth
        context = makeContext()
    }

    deinit {
        if let context { xmlFreeParserCtxt(context) }
    }

    /// Starts over on a new stream (RFC 6120 §4.3.3: after SASL success both
    /// sides start a new stream on the same connection).
    public func reset() {
        if let context { xmlFreeParserCtxt(context) }
        events = []
        failure = nil
        open = []
        text = []
        depth = 0
        fed = 0
        boundary = 0
        screen = ByteScreen()
        context = makeContext()
    }

    /// Parses the next bytes of the stream: the events they completed, in order,
    /// and the error that stopped the stream, if any (the events then are those
    /// completed before it).
    public func feed(_ bytes: UnsafeRawBufferPointer) -> (events: [XMLStreamEvent], error: XMLStreamParserError?) {
        if let failure { return ([], failure) }
        guard let context else { return ([], .notWellFormed("no parser")) }
        defer { events = [] }
        var offset = 0
        while offset < bytes.count {
            var count = min(Self.slice, bytes.count - offset)
            let chunk = bytes.baseAddress!.advanced(by: offset).assumingMemoryBound(to: CChar.self)
            // Bytes libxml2's push parser refuses or not depending on where
            // the reads end (xmpp-fuzz) are refused here, before it, wherever
            // they end: it gets the bytes before them.
            let refused = screen.firstRefused(in: UnsafeRawBufferPointer(start: chunk, count: count))
            if let refused { count = refused.index }
            let status = count > 0 ? xmlParseChunk(context, chunk, Int32(count), 0) : 0
            offset += count
            fed += count
            if failure == nil, status != 0 {
                failure = Self.classify(status: status, context: context)
            }
            if failure == nil, let refused {
                failure = .notWellFormed(refused.reason)
            }
            if failure == nil, fed - boundary > maximumStanzaBytes {
                failure = .stanzaTooLarge(limit: maximumStanzaBytes)
            }
            if let failure {
                xmlStopParser(context)
                return (events, failure)
            }
        }
        return (events, nil)
    }

    /// The stream's bytes as they come, checked for what libxml2 would not
    /// refuse the same way whatever the reads.
    private var screen = ByteScreen()

    /// Parses the next bytes of the stream and returns the events they completed;
    /// throws the error that stopped the stream instead, if any.
    public func parse(_ bytes: UnsafeRawBufferPointer) throws(XMLStreamParserError) -> [XMLStreamEvent] {
        let (events, error) = feed(bytes)
        if let error { throw error }
        return events
    }

    /// Parses the next bytes of the stream and returns the events they completed;
    /// throws the error that stopped the stream instead, if any.
    public func parse(_ bytes: some Sequence<UInt8>) throws(XMLStreamParserError) -> [XMLStreamEvent] {
        try Array(bytes).withUnsafeBytes { buffer in Result { () throws(XMLStreamParserError) in try parse(buffer) } }.get()
    }

    // MARK: libxml2

    /// libxml2's one-time global setup, and a loader that refuses every external
    /// entity, process-wide: no parse in this process may read a file or the network.
    private static let initializeLibrary: Void = {
        xmlInitParser()
        xmlSetExternalEntityLoader { _, _, _ in nil }
    }()

    private func makeContext() -> xmlParserCtxtPtr? {
        var handler = Self.makeHandler()
        // libxml2 copies the handler; the context's user data is this parser,
        // which owns (and outlives) the context.
        let context = xmlCreatePushParserCtxt(&handler, Unmanaged.passUnretained(self).toOpaque(), nil, 0, nil)
        // No XML_PARSE_NOENT (no substitution), no DTD loading; the encoding
        // declaration is ignored, UTF-8 is the only one accepted.
        xmlCtxtUseOptions(context, Int32(XML_PARSE_NONET.rawValue | XML_PARSE_IGNORE_ENC.rawValue))
        return context
    }

    private static func parser(_ context: UnsafeMutableRawPointer?) -> XMLStreamParser {
        Unmanaged<XMLStreamParser>.fromOpaque(context!).takeUnretainedValue()
    }

    private static func makeHandler() -> xmlSAXHandler {
        var handler = xmlSAXHandler()
        handler.initialized = 0xDEEDBEAF  // XML_SAX2_MAGIC: use the namespace-aware callbacks.
        handler.startElementNs = { context, localName, prefix, uri, namespaceCount, namespaces, attributeCount, _, attributes in
            XMLStreamParser.parser(context).startElement(
                localName: localName, prefix: prefix, uri: uri, namespaceCount: Int(namespaceCount), namespaces: namespaces,
                attributeCount: Int(attributeCount), attributes: attributes)
        }
        handler.endElementNs = { context, _, _, _ in XMLStreamParser.parser(context).endElement() }
        handler.characters = { context, bytes, count in XMLStreamParser.parser(context).characters(bytes, Int(count)) }
        handler.ignorableWhitespace = handler.characters
        handler.cdataBlock = handler.characters
        handler.comment = { context, _ in XMLStreamParser.parser(context).restrict("comment") }
        handler.processingInstruction = { context, _, _ in XMLStreamParser.parser(context).restrict("processing instruction") }
        handler.internalSubset = { context, _, _, _ in XMLStreamParser.parser(context).restrict("document type declaration") }
        handler.externalSubset = { context, _, _, _ in XMLStreamParser.parser(context).restrict("document type declaration") }
        handler.entityDecl = { context, _, _, _, _, _ in XMLStreamParser.parser(context).restrict("entity declaration") }
        // Asked only for entities other than the five predefined ones.
        handler.getEntity = { context, name in
            XMLStreamParser.parser(context).restrict("entity reference &\(XMLStreamParser.string(name) ?? "");")
            return nil
        }
        handler.getParameterEntity = { context, _ in
            XMLStreamParser.parser(context).restrict("parameter entity reference")
            return nil
        }
        handler.resolveEntity = { context, _, _ in
            XMLStreamParser.parser(context).restrict("external entity")
            return nil
        }
        handler.reference = { context, _ in XMLStreamParser.parser(context).restrict("entity reference") }
        // Errors come back through xmlParseChunk's status; this keeps libxml2 from printing them.
        handler.serror = { _, _ in }
        return handler
    }

    private static func classify(status: Int32, context: xmlParserCtxtPtr) -> XMLStreamParserError {
        let code = xmlParserErrors(rawValue: UInt32(status))
        let message = xmlCtxtGetLastError(context).flatMap { string($0.pointee.message) }?
            .trimmingSuffix(while: \.isNewline) ?? "error \(status)"
        switch code {
        case XML_ERR_UNDECLARED_ENTITY, XML_WAR_UNDECLARED_ENTITY, XML_ERR_ENTITY_PE_INTERNAL:
            return .restrictedXML(message)
        case XML_ERR_UNSUPPORTED_ENCODING, XML_ERR_UNKNOWN_ENCODING:
            return .unsupportedEncoding
        default:
            return .notWellFormed(message)
        }
    }

    private static func string(_ pointer: UnsafePointer<xmlChar>?) -> String? {
        pointer.map { String(cString: $0) }
    }

    private static func string(_ pointer: UnsafePointer<CChar>?) -> String? {
        pointer.map { String(cString: $0) }
    }

    // MARK: SAX events

    private func stop(_ error: XMLStreamParserError) {
        if failure == nil { failure = error }
        xmlStopParser(context)
    }

    private func restrict(_ what: String) {
        stop(.restrictedXML(what))
    }

    private var consumed: Int { Int(xmlByteConsumed(context)) }

    private func startElement(
        localName: UnsafePointer<xmlChar>?, prefix: UnsafePointer<xmlChar>?, uri: UnsafePointer<xmlChar>?,
        namespaceCount: Int, namespaces: UnsafeMutablePointer<UnsafePointer<xmlChar>?>?,
        attributeCount: Int, attributes: UnsafeMutablePointer<UnsafePointer<xmlChar>?>?
    ) {
        guard failure == nil else { return }
        depth += 1
        if depth > maximumDepth { return stop(.nestedTooDeep(limit: maximumDepth)) }
        let name = Self.string(localName) ?? ""
        let namespace = Self.string(uri)
        // libxml2 only warns about these; Namespaces in XML (which XMPP requires) forbids them.
        if let prefix = Self.string(prefix), namespace == nil { return stop(.undeclaredPrefix("\(prefix):\(name)")) }
        var attributeValues: [String: String] = [:]
        for index in 0..<attributeCount {
            // Five pointers each: local name, prefix, URI, value start, value end.
            let base = index * 5
            guard let local = attributes?[base], let start = attributes?[base + 3], let end = attributes?[base + 4]
            else { continue }
            let attributeURI = Self.string(attributes?[base + 2])
            if let prefix = Self.string(attributes?[base + 1]), attributeURI == nil {
                return stop(.undeclaredPrefix("\(prefix):\(Self.string(local)!)"))
            }
            let key: String
            if attributeURI == nil {
                key = Self.string(local)!
            } else if attributeURI == "http://www.w3.org/XML/1998/namespace" {
                key = "xml:" + Self.string(local)!
            } else {
                continue  // Namespaced attributes other than xml:* have no use in XMPP stanzas.
            }
            let value = String(decoding: UnsafeBufferPointer(start: start, count: end - start), as: UTF8.self)
            // Without entity substitution libxml2 hands over an escaped '&' as "&#38;"
            // (any other reference is already replaced); a literal '&' cannot occur.
            attributeValues[key] = value.contains("&") ? value.replacing("&#38;", with: "&") : value
        }
        if depth == 1 {
            if context?.pointee.input?.pointee.buf?.pointee.encoder != nil { return stop(.unsupportedEncoding) }
            var declarations: [String: String] = [:]
            for index in 0..<namespaceCount {
                declarations[Self.string(namespaces?[2 * index]) ?? ""] = Self.string(namespaces?[2 * index + 1]) ?? ""
            }
            events.append(.streamOpened(XMLStreamHeader(
                name: name, namespace: namespace, attributes: attributeValues, namespaceDeclarations: declarations)))
            boundary = consumed
            return
        }
        flushText()
        open.append(XMLElement(name, namespace: namespace, attributes: attributeValues))
    }

    private func endElement() {
        guard failure == nil else { return }
        depth -= 1
        if depth == 0 {
            events.append(.streamClosed)
            boundary = consumed
            return
        }
        flushText()
        let element = open.removeLast()
        if open.isEmpty {
            // A stanza that ended inside one chunk escaped the check between chunks.
            let end = consumed
            if end - boundary > maximumStanzaBytes { return stop(.stanzaTooLarge(limit: maximumStanzaBytes)) }
            events.append(.stanza(element))
            boundary = end
        } else {
            open[open.count - 1].children.append(.element(element))
        }
    }

    private func characters(_ bytes: UnsafePointer<xmlChar>?, _ count: Int) {
        guard failure == nil, let bytes else { return }
        let buffer = UnsafeBufferPointer(start: bytes, count: count)
        if open.isEmpty {
            // Between stanzas: whitespace keepalives only.
            if !buffer.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) {
                return stop(.textOutsideStanza)
            }
            boundary = consumed
            return
        }
        text.append(contentsOf: buffer)
    }

    private func flushText() {
        guard !text.isEmpty, !open.isEmpty else { return }
        open[open.count - 1].children.append(.text(String(decoding: text, as: UTF8.self)))
        text.removeAll(keepingCapacity: true)
    }
}

private extension String {
    func trimmingSuffix(while predicate: (Character) -> Bool) -> String {
        var result = self
        while let last = result.last, predicate(last) { result.removeLast() }
        return result
    }
}

/// An XML stream's bytes checked one by one across reads, in one pass, for
/// what libxml2's push parser reports or not depending on where the reads end
/// (each found by xmpp-fuzz):
/// - a C0 control but tab, newline and carriage return: no XML 1.0 character,
///   and in UTF-8 no other character has such a byte;
/// - a '<' inside a quoted attribute value (XML 1.0 [10] AttValue forbids it).
///   To know where values are, it follows text, tags (with the XML
///   declaration and whatever else starts with '<'), quoted values inside
///   tags, and CDATA sections, whose content may hold quotes and '<'.
///   Comments and other declarations are scanned as tags; XMPP refuses them
///   anyway.
struct ByteScreen {
    private enum State {
        case text
        /// After '<'.
        case opening
        /// After "<!" and this many bytes of "[CDATA[".
        case bang(Int)
        case tag
        case quoted(UInt8)
        /// Inside a CDATA section, after this many ']' in a row.
        case cdata(Int)
    }

    private static let cdataOpening = Array("[CDATA[".utf8)
    private var state = State.text

    /// The first byte of `bytes` to refuse, and why; nil if there is none.
    /// After one the stream has failed, and the state is not kept up.
    mutating func firstRefused(in bytes: UnsafeRawBufferPointer) -> (index: Int, reason: String)? {
        for (index, byte) in bytes.enumerated() {
            if byte < 0x20, byte != 0x09, byte != 0x0A, byte != 0x0D {
                let hex = String(byte, radix: 16, uppercase: true)
                return (index, "a control character (U+\(String(repeating: "0", count: 4 - hex.count) + hex)), which XML forbids")
            }
            switch state {
            case .text:
                if byte == UInt8(ascii: "<") { state = .opening }
            case .opening:
                state = byte == UInt8(ascii: "!") ? .bang(0) : .tag
                if case .tag = state { inTag(byte) }
            case .bang(let matched):
                if byte == Self.cdataOpening[matched] {
                    state = matched + 1 == Self.cdataOpening.count ? .cdata(0) : .bang(matched + 1)
                } else {
                    state = .tag
                    inTag(byte)
                }
            case .tag:
                inTag(byte)
            case .quoted(let quote):
                if byte == UInt8(ascii: "<") { return (index, "a '<' in an attribute value, which XML forbids") }
                if byte == quote { state = .tag }
            case .cdata(let brackets):
                if byte == UInt8(ascii: "]") {
                    state = .cdata(brackets + 1)
                } else {
                    state = byte == UInt8(ascii: ">") && brackets >= 2 ? .text : .cdata(0)
                }
            }
        }
        return nil
    }

    private mutating func inTag(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "'"), UInt8(ascii: "\""): state = .quoted(byte)
        case UInt8(ascii: ">"): state = .text
        default: break
        }
    }
}
