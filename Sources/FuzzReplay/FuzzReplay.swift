import Foundation

/// The plain-build half of every fuzz harness (beacons-fuzz, xmpp-fuzz,
/// ccs-fuzz): their property run over the inputs named on the command line,
/// a corpus directory or crash reproducers, as `make test` does with each
/// harness's committed corpus.
public enum FuzzReplay {
    /// Why an input could not be read.
    public struct MissingInput: Error, CustomStringConvertible {
        public let path: String
        public var description: String { "no such file or directory: \(path)" }
    }

    /// Calls `property` with the contents of each file in `paths`, a
    /// directory standing for the files in it (by name); returns how many.
    @discardableResult
    public static func run(_ paths: [String], _ property: ([UInt8]) throws -> Void) throws -> Int {
        var count = 0
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { throw MissingInput(path: path) }
            let files = isDirectory.boolValue
                ? try FileManager.default.contentsOfDirectory(atPath: path).sorted().map { path + "/" + $0 }
                : [path]
            for file in files {
                try property(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
                count += 1
            }
        }
        return count
    }
}
