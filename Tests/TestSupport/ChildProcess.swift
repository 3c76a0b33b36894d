import Foundation
import Subprocess
import Synchronization

/// A program a test started: its output lines as they come, its exit status,
/// and a guaranteed end (SIGKILL at the latest when the object goes away).
///
/// Started through swift-subprocess, which resets the signal mask and handlers
/// for the child; Foundation's `Process` passes on the blocked signals of the
/// concurrency thread that spawns it, and such a child ignores SIGTERM.
public final class ChildProcess: Sendable {
    public let name: String
    public let lines = Inbox<String>()
    /// The longest output line taken (a load generator's result, its
    /// latencies, runs to a few hundred KiB); a longer one ends the reading of
    /// the output, as swift-subprocess refuses it.
    static let maxLineBytes = 16 << 20
    public let pid: Int32
    private let exited = Inbox<Int32>()
    private let runner: Task<Void, Never>
    /// Lines for the program's standard input (``send(_:)``); finished at deinit.
    private let input: AsyncStream<String>.Continuation

    /// Starts `executable` with stdout and stderr captured line by line; with
    /// `takesInput`, its standard input is a pipe fed by ``send(_:)``.
    public init(name: String, executable: String, arguments: [String],
                environment: [String: String] = [:], takesInput: Bool = false) async throws {
        self.name = name
        var updates: [Environment.Key: String?] = [:]
        for (key, value) in environment {
            if let key = Environment.Key(rawValue: key) { updates[key] = value }
        }
        let configuration = Configuration(
            executable: .path(.init(executable)), arguments: Arguments(arguments),
            environment: .inherit.updating(updates))
        let started = Inbox<Result<Int32, ChildProcessError>>()
        let (inputLines, input) = AsyncStream.makeStream(of: String.self)
        self.input = input
        runner = Task { [lines, exited] in
            do {
                let status: TerminationStatus
                if takesInput {
                    status = try await run(configuration, input: .inputWriter, output: .sequence,
                                           error: .combinedWithOutput) { execution in
                        started.put(.success(Self.began(execution.processIdentifier.value)))
                        let writer = execution.standardInputWriter
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            // A program that stops reading (or has exited) leaves the rest unwritten.
                            group.addTask {
                                for await line in inputLines { _ = try? await writer.write(line + "\n") }
                                try? await writer.finish()
                            }
                            for try await line in execution.standardOutput.strings(bufferingPolicy: .maxLineLength(Self.maxLineBytes)) { lines.put(line) }
                            group.cancelAll()
                        }
                    }.terminationStatus
                } else {
                    status = try await run(configuration, input: .none, output: .sequence,
                                           error: .combinedWithOutput) { execution in
                        started.put(.success(Self.began(execution.processIdentifier.value)))
                        for try await line in execution.standardOutput.strings(bufferingPolicy: .maxLineLength(Self.maxLineBytes)) { lines.put(line) }
                    }.terminationStatus
                }
                switch status {
                case .exited(let code): exited.put(code)
                case .signaled(let signal): exited.put(128 + signal)
                }
            } catch {
                started.put(.failure(ChildProcessError(message: "\(name): \(error)")))
                exited.put(-1)
            }
            if case .success(let pid) = started.values.first { _ = Self.running.withLock { $0.remove(pid) } }
        }
        pid = try await started.first(within: 30, "\(name) to start") { _ in true }.get()
    }

    /// The programs started and not yet ended, for ``killAll()``.
    private static let running = Mutex<Set<Int32>>([])

    /// Notes `pid` as running until its runner has seen it end: both on the
    /// runner's task, so an end is never noted before its start.
    private static func began(_ pid: Int32) -> Int32 {
        _ = running.withLock { $0.insert(pid) }
        return pid
    }

    /// SIGKILLs every program started here that is still running: for a
    /// process about to end on a signal, which runs no deinit, so that it
    /// leaves no bus, server or daemon behind.
    public static func killAll() {
        for pid in running.withLock({ $0 }) { kill(pid, SIGKILL) }
    }

    deinit {
        input.finish()
        if exited.values.isEmpty { kill(pid, SIGKILL) }
    }

    /// Writes `line` and a newline to the program's standard input (started with `takesInput`).
    public func send(_ line: String) {
        input.yield(line)
    }

    public var isRunning: Bool { exited.values.isEmpty }

    /// The exit status once the program has ended (128 + signal if killed).
    public var exitStatus: Int32? { exited.values.first }

    /// Everything the program printed so far.
    public var output: String { lines.values.joined(separator: "\n") }

    /// Waits for an output line containing `text`.
    @discardableResult
    public func waitForLine(containing text: String, within seconds: Double = 20) async throws -> String {
        do {
            return try await lines.first(within: seconds, "\(name) to print '\(text)'") { $0.contains(text) }
        } catch {
            throw ChildProcessError(message: "\(error)\n--- \(name) output ---\n\(output)")
        }
    }

    /// How many output lines so far contain `text`.
    public func lineCount(containing text: String) -> Int {
        lines.values.count { $0.contains(text) }
    }

    /// Waits for the `occurrence`th output line containing `text`, counting
    /// those already printed.
    @discardableResult
    public func waitForLine(containing text: String, occurrence: Int, within seconds: Double = 20) async throws -> String {
        do {
            return try await lines.nth(occurrence, within: seconds, "\(name) to print '\(text)' (\(occurrence))") { $0.contains(text) }
        } catch {
            throw ChildProcessError(message: "\(error)\n--- \(name) output ---\n\(output)")
        }
    }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the program to end and returns its exit status.
    @discardableResult
    public func waitForExit(within seconds: Double = 20) async throws -> Int32 {
        try await exited.first(within: seconds, "\(name) to exit") { _ in true }
    }

    /// SIGTERM, then SIGKILL if it has not exited in `grace` seconds.
    public func stop(grace: Double = 10) async {
        signal(SIGTERM)
        if (try? await waitForExit(within: grace)) == nil {
            signal(SIGKILL)
            _ = try? await waitForExit(within: grace)
        }
        await runner.value
    }
}

public struct ChildProcessError: Error, CustomStringConvertible {
    public let message: String

    public init(message: String) {
        self.message = message
    }

    public var description: String { message }
}
