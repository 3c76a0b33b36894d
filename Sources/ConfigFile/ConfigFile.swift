import Foundation
import TOMLKit

/// A configuration problem, worded for the person who wrote the file or flag.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}

/// A TOML configuration file read strictly: every section and key must be one
/// the program knows, every value of the type it expects. Mistyped settings are
/// errors that name the file, section and key, never silently ignored.
public struct ConfigFile {
    /// How the file is named in messages (its path).
    public let source: String
    private let table: TOMLTable

    /// Reads the file at `path`. A missing file is an error only when `required`
    /// (it was named explicitly); otherwise it reads as empty.
    public init(path: String, required: Bool) throws(ConfigurationError) {
        guard FileManager.default.fileExists(atPath: path) else {
            if required { throw ConfigurationError("\(path): no such file") }
            try self.init(text: "", source: path)
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("\(path): cannot be read")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError("\(path): is not UTF-8 text")
        }
        try self.init(text: text, source: path)
    }

    public init(text: String, source: String) throws(ConfigurationError) {
        self.source = source
        try Self.checkTableHeaders(text, source: source)
        try Self.checkDateTimes(text, source: source)
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigurationError("\(source): line \(error.source.begin.line): \(error.description)")
        } catch {
            throw ConfigurationError("\(source): \(error)")
        }
    }

    /// Throws unless every top-level entry is one of `known`, written as a section.
    public func checkSections(_ known: [String]) throws(ConfigurationError) {
        let sections = known.map { "[\($0)]" }.joined(separator: ", ")
        for name in table.keys {
            guard table[name]?.table != nil else {
                throw ConfigurationError("\(source): '\(name)' is outside any section; keys belong in one of \(sections)")
            }
            guard known.contains(name) else {
                throw ConfigurationError("\(source): unknown section [\(name)]; known: \(sections)")
            }
        }
    }

    /// The keys outside any section, for files that are one record rather than
    /// sections (keys in the sections are for ``section(_:keys:)``), after
    /// checking the file holds only `keys` and the sections `sections`.
    public func topLevel(keys: [String], sections: [String]) throws(ConfigurationError) -> Section {
        let known = (keys + sections.map { "[\($0)]" }).joined(separator: ", ")
        for name in table.keys {
            if sections.contains(name) {
                guard table[name]?.table != nil else {
                    throw ConfigurationError("\(source): '\(name)' must be a section [\(name)]")
                }
            } else if !keys.contains(name) {
                let entry = table[name]?.table != nil ? "section [\(name)]" : "key '\(name)'"
                throw ConfigurationError("\(source): unknown \(entry); known: \(known)")
            }
        }
        return Section(source: source, name: "", table: table)
    }

    /// The section `name` (empty if absent), after checking it holds only `keys`.
    public func section(_ name: String, keys: [String]) throws(ConfigurationError) -> Section {
        let body = table[name]?.table ?? TOMLTable()
        for key in body.keys where !keys.contains(key) {
            throw ConfigurationError("\(source): unknown key '\(key)' in [\(name)]; known: \(keys.joined(separator: ", "))")
        }
        return Section(source: source, name: name, table: body)
    }
}

/// One `[section]` of a ``ConfigFile``; each getter returns nil for an absent key.
public struct Section {
    let source: String
    let name: String
    let table: TOMLTable

    public func string(_ key: String) throws(ConfigurationError) -> String? {
        guard let value = table[key] else { return nil }
        guard let text = value.string else { throw wrongType(key, "a string") }
        return text
    }

    public func integer(_ key: String) throws(ConfigurationError) -> Int? {
        guard let value = table[key] else { return nil }
        guard value.type == .int, let number = value.int else { throw wrongType(key, "an integer") }
        return number
    }

    /// A number written as an integer or with a fraction.
    public func number(_ key: String) throws(ConfigurationError) -> Double? {
        guard let value = table[key] else { return nil }
        switch value.type {
        case .int: return value.int.map(Double.init)
        case .double: return value.double
        default: throw wrongType(key, "a number")
        }
    }

    public func bool(_ key: String) throws(ConfigurationError) -> Bool? {
        guard let value = table[key] else { return nil }
        guard let flag = value.bool else { throw wrongType(key, "true or false") }
        return flag
    }

    public func strings(_ key: String) throws(ConfigurationError) -> [String]? {
        guard let value = table[key] else { return nil }
        guard let array = value.array else { throw wrongType(key, "an array of strings") }
        var result: [String] = []
        for element in array {
            guard let text = element.string else { throw wrongType(key, "an array of strings") }
            result.append(text)
        }
        return result
    }

    /// A string, or an array of strings (a key that takes one value or a
    /// list): the string alone, or the array's strings.
    public func stringOrStrings(_ key: String) throws(ConfigurationError) -> [String]? {
        guard let value = table[key] else { return nil }
        if let text = value.string { return [text] }
        let texts = value.array.map { $0.map(\.string) } ?? [nil]
        guard !texts.contains(nil) else { throw wrongType(key, "a string or an array of strings") }
        return texts.compactMap { $0 }
    }

    public func numbers(_ key: String) throws(ConfigurationError) -> [Double]? {
        guard let value = table[key] else { return nil }
        guard let array = value.array else { throw wrongType(key, "an array of numbers") }
        var result: [Double] = []
        for element in array {
            switch element.type {
            case .int: result.append(Double(element.int ?? 0))
            case .double: result.append(element.double ?? 0)
            default: throw wrongType(key, "an array of numbers")
            }
        }
        return result
    }

    /// An error about `key`'s value, for checks the getters cannot make.
    public func invalid(_ key: String, _ problem: String) -> ConfigurationError {
        // The top level (``ConfigFile/topLevel(keys:sections:)``) has no section name.
        ConfigurationError(name.isEmpty ? "\(source): \(key) \(problem)" : "\(source): [\(name)] \(key) \(problem)")
    }

    private func wrongType(_ key: String, _ expected: String) -> ConfigurationError {
        invalid(key, "must be \(expected)")
    }
}
