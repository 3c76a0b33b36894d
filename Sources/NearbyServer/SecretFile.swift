import ConfigFile
import Foundation

/// Files that hold a secret (the database's password): one every user on
/// the machine may read is refused, with what to do about it, rather than
/// used while it gives the secret away.
enum SecretFile {
    /// The most a password file may hold: a password is a line.
    static let maxBytes = 4096

    /// Throws when every user may read the file at `path` (no error when it
    /// cannot be found: reading it says so).
    static func checkNotWorldReadable(_ path: String, holding what: String, instead: String) throws(ConfigurationError) {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IROTH != 0 else { return }
        throw ConfigurationError("\(path) holds \(what) and every user may read it (mode \(String(info.st_mode & 0o7777, radix: 8))): "
            + "chmod o-rwx \(path) (the package's is 0640, group nearby-server), \(instead)")
    }

    /// The first line of the file at `path`, refused when every user may
    /// read it, when it is not a regular file of at most ``maxBytes``, or when
    /// the line is empty.
    static func firstLine(of path: String, what: String) throws(ConfigurationError) -> String {
        try checkNotWorldReadable(path, holding: "a password (\(what))", instead: "or give the password in PGPASSWORD")
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw ConfigurationError("\(what): cannot read \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_size <= maxBytes else {
            throw ConfigurationError("\(what): \(path) must be a regular file of at most \(maxBytes) bytes")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("\(what): cannot read \(path)")
        }
        let line = data.prefix { $0 != UInt8(ascii: "\n") }
        let text = String(decoding: line.last == UInt8(ascii: "\r") ? line.dropLast() : line, as: UTF8.self)
        guard !text.isEmpty else { throw ConfigurationError("\(what): \(path) is empty: its first line is the password") }
        return text
    }
}
