import Foundation

/// The plain-build half of every fuzz harness: its property run over the
/// inputs named on the command line, a corpus directory or crash
/// reproducers, as `make test` does with each harness's committed corpus.
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

#if LIBFUZZER
import FuzzDriver
#endif
import Synchronization

/// The `main` of every fuzz harness. Built for fuzzing (`make fuzz`:
/// `-sanitize=fuzzer` and `-DLIBFUZZER`), it hands control to libFuzzer,
/// which parses its own flags and checks `property` on each input it makes;
/// built plainly, it replays the paths on the command line with `replay`
/// (by default: `property` on each file's bytes) and prints `NAME: ` and
/// what that returns. `property` traps on a broken promise.
public enum FuzzHarness {
    public typealias Property = @Sendable ([UInt8]) -> Void

    public static func main(_ name: String, property: @escaping Property,
                            replay: (([String]) throws -> String)? = nil) -> Never {
        #if LIBFUZZER
        running.withLock { $0 = property }
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzOneInput))
        #else
        let replay = replay ?? { "replayed \(try FuzzReplay.run($0, property)) inputs, no broken promises" }
        do {
            print("\(name): \(try replay(Array(CommandLine.arguments.dropFirst())))")
            exit(0)
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(1)
        }
        #endif
    }

    /// The property libFuzzer's callback checks: set once, before libFuzzer runs.
    static let running = Mutex<Property?>(nil)
}

/// libFuzzer's per-input callback, which `-sanitize=fuzzer` also requires
/// the program to define: the running harness's property on the input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    FuzzHarness.running.withLock { $0 }?(input)
    return 0
}
