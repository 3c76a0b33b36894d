// Coverage-guided fuzzing of text on its way to nearby-server's storage, on
// both engines at once (README.md): the harness starts a throwaway
// PostgreSQL cluster, runs itself again against it, and removes the cluster
// however that run ends.

import Dispatch
import FuzzReplay
import Foundation
@_spi(Testing) import NearbyServer
import Synchronization
import TestSupport

/// Where the harness's second run finds the cluster the first started.
private let clusterURLVariable = "NEARBY_STORAGE_FUZZ_POSTGRES"
private let clusterDirectoryVariable = "NEARBY_STORAGE_FUZZ_DIRECTORY"

/// Runs `body` to its end on the concurrency pool while this thread (libFuzzer's)
/// waits; one that takes longer than `seconds` (an input: a minute) is a hang,
/// and a finding.
func blocking<T: Sendable>(_ what: String, within seconds: Int = 60,
                           _ body: @escaping @Sendable () async throws -> T) throws -> T {
    let result = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        let outcome: Result<T, any Error>
        do { outcome = .success(try await body()) } catch { outcome = .failure(error) }
        result.withLock { $0 = outcome }
        done.signal()
    }
    guard done.wait(timeout: .now() + .seconds(seconds)) == .success else {
        fatalError("storage-fuzz: \(what) took more than \(seconds) s")
    }
    return try result.withLock { $0! }.get()
}

/// How many inputs the second run has checked: each input's beacon id.
private let inputsChecked = Atomic<UInt32>(0)

/// The second run: both engines opened, then libFuzzer (or the replay of
/// the paths given) with the contract as its property.
func fuzz(postgresURL: String, directory: String) -> Never {
    let contract: StorageTextContract
    do {
        contract = try blocking("opening the engines") {
            let sqlite = try SQLiteStorage(path: "\(directory)/storage-fuzz.sqlite")
            let postgres = try await PostgresStorage(url: postgresURL)
            return try await StorageTextContract(sqlite: sqlite, postgres: postgres)
        }
    } catch {
        FileHandle.standardError.write(Data("storage-fuzz: cannot open the engines: \(error)\n".utf8))
        exit(1)
    }
    FuzzHarness.main("storage-fuzz") { input in
        let number = inputsChecked.add(1, ordering: .relaxed).oldValue
        do {
            try blocking("an input") { await contract.check(input, sequence: number) }
        } catch {
            fatalError("storage-fuzz: \(error)")
        }
    }
}

/// The first run: a throwaway cluster, the second run against it with this
/// run's arguments, the cluster removed, the second run's status returned.
/// SIGINT and SIGTERM go on to the second run, so that an interrupted
/// `make fuzz` still removes the cluster.
func superviseWithCluster() -> Never {
    let cluster: PostgresCluster
    let url: String
    do {
        // PostgresCluster bounds each of its steps (initdb: 120 s) itself.
        (cluster, url) = try blocking("starting PostgreSQL", within: 600) {
            let cluster = try await PostgresCluster.start()
            do {
                return (cluster, try await cluster.createDatabase())
            } catch {
                await cluster.stop()
                throw error
            }
        }
    } catch {
        FileHandle.standardError.write(Data("storage-fuzz: cannot start a PostgreSQL cluster: \(error)\n".utf8))
        exit(1)
    }
    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe")
    child.arguments = Array(CommandLine.arguments.dropFirst())
    // No leak check in a fuzzing build (README.md): the engines' pooled
    // connections keep what LeakSanitizer cannot see held.
    var environment = ProcessInfo.processInfo.environment
    environment[clusterURLVariable] = url
    environment[clusterDirectoryVariable] = cluster.directory
    environment["ASAN_OPTIONS"] = (environment["ASAN_OPTIONS"].map { $0 + ":" } ?? "") + "detect_leaks=0"
    child.environment = environment
    var forwarding: [any DispatchSourceSignal] = []
    for signal in [SIGINT, SIGTERM] {
        Foundation.signal(signal, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: signal, queue: .global())
        source.setEventHandler { if child.isRunning { kill(child.processIdentifier, signal) } }
        source.resume()
        forwarding.append(source)
    }
    var status: Int32 = 1
    do {
        try child.run()
        child.waitUntilExit()
        status = child.terminationReason == .exit ? child.terminationStatus : 128 + child.terminationStatus
    } catch {
        FileHandle.standardError.write(Data("storage-fuzz: cannot run itself again: \(error)\n".utf8))
    }
    _ = try? blocking("removing the PostgreSQL cluster", within: 120) { await cluster.stop() }
    forwarding.forEach { $0.cancel() }
    // Not exit(): a fuzzing build's LeakSanitizer would check this run too
    // at exit, and Foundation's Process keeps a little for good.
    _exit(status)
}

@main
enum Main {
    static func main() {
        let environment = ProcessInfo.processInfo.environment
        if let url = environment[clusterURLVariable], let directory = environment[clusterDirectoryVariable] {
            fuzz(postgresURL: url, directory: directory)
        }
        superviseWithCluster()
    }
}
