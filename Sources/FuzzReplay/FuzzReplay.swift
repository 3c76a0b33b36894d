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

/// The `main` of every fuzz harness. Built for fuzzing (`make fuzz`:
/// `-sanitize=fuzzer` and `-DLIBFUZZER`), it hands control to libFuzzer,
/// which parses its own flags and calls `oneInput` (the harness's
/// `LLVMFuzzerTestOneInput`); built plainly, it replays the paths on the
/// command line with `replay` and prints `NAME: ` and what that returns.
public enum FuzzHarness {
    /// libFuzzer's per-input callback.
    public typealias OneInput = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt

    public static func main(_ name: String, _ oneInput: OneInput, replay: ([String]) throws -> String) -> Never {
        #if LIBFUZZER
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, oneInput))
        #else
        do {
            print("\(name): \(try replay(Array(CommandLine.arguments.dropFirst())))")
            exit(0)
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(1)
        }
        #endif
    }

    /// The same, replaying each input through `check`, which traps on a broken promise.
    public static func main(_ name: String, _ oneInput: OneInput, check: ([UInt8]) throws -> Void) -> Never {
        main(name, oneInput) { "replayed \(try FuzzReplay.run($0, check)) inputs, no broken promises" }
    }
}
