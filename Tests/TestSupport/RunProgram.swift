import Foundation
import Subprocess

/// What a program that ran to its end printed, and how it ended.
public struct ProgramResult: Sendable {
    public let status: Int32
    public let output: String
}

/// Runs a program to its end, stdout and stderr together.
public func runProgram(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> ProgramResult {
    var updates: [Environment.Key: String?] = [:]
    for (key, value) in environment {
        if let key = Environment.Key(rawValue: key) { updates[key] = value }
    }
    let result = try await run(
        Configuration(executable: .path(.init(executable)), arguments: Arguments(arguments),
                      environment: .inherit.updating(updates)),
        output: .string(limit: 1 << 20), error: .combinedWithOutput)
    let status: Int32 = switch result.terminationStatus {
    case .exited(let code): code
    case .signaled(let signal): 128 + signal
    }
    return ProgramResult(status: status, output: result.standardOutput)
}

/// What a program that ran to its end printed on stdout and on stderr, apart.
public struct SeparatedProgramResult: Sendable {
    public let status: Int32
    public let output: String
    public let errors: String
}

/// Runs a program to its end, without holding a thread of the cooperative
/// pool while it runs (the tests share two), within `seconds`.
public func runProgramSeparately(_ executable: String, _ arguments: [String], within seconds: Double = 60) async throws
    -> SeparatedProgramResult {
    try await withTimeout(seconds, "\(executable) to exit") {
        let result = try await run(.path(.init(executable)), arguments: Arguments(arguments),
                                   output: .string(limit: 1 << 20), error: .string(limit: 1 << 20))
        let status: Int32 = switch result.terminationStatus {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
        return SeparatedProgramResult(status: status, output: result.standardOutput, errors: result.standardError)
    }
}
