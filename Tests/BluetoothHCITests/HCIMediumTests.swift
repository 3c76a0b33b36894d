@testable import BluetoothHCI
import Beacons
import Glibc
import Logging
import Mediums
import NearbyCore
import Synchronization
import Testing

@Suite struct HCIMediumTests {
    /// Whether this host's kernel lacks Bluetooth sockets altogether, as the
    /// build machine's does.
    static let bluetoothSocketsUnsupported: Bool = {
        let descriptor = socket(31 /* AF_BLUETOOTH */, Int32(SOCK_RAW.rawValue), 1 /* BTPROTO_HCI */)
        if descriptor >= 0 { close(descriptor) }
        return descriptor < 0 && errno == EAFNOSUPPORT
    }()

    /// hci0 where the kernel has no Bluetooth (nothing to touch); elsewhere a
    /// device no host has, so the test never takes a real controller.
    static let device = bluetoothSocketsUnsupported ? "hci0" : "hci4095"

    @Test(arguments: HCIMedium.Channel.allCases)
    func withoutADeviceTheMediumIsUnavailableKeepsRetryingAndStops(channel: HCIMedium.Channel) async throws {
        let log = LogCapture()
        let settings = HCIMedium.Settings(device: Self.device, channel: channel,
                                          retryDelay: .milliseconds(1), maximumRetryDelay: .milliseconds(8),
                                          logger: log.logger)
        let medium = HCIMedium(settings: settings)
        // Wishes before run() and while it fails are recorded, never block.
        await medium.broadcast([Token(hex: "0011223344556677")!])
        await medium.scan(.full)
        let run = Task { await medium.run() }

        let first = try await withTimeout(.seconds(10)) { () async -> MediumCondition? in
            for await condition in medium.conditionChanges { return condition }
            return nil
        }
        #expect(first == .unavailable)

        // Five failed attempts in a row, the delay doubling up to its maximum.
        let failures = try await withTimeout(.seconds(10)) {
            var failures: [LogCapture.Record] = []
            for await record in log.records where record.metadata["attempt"] != nil {
                failures.append(record)
                if failures.count == 5 { break }
            }
            return failures
        }
        #expect(failures.map { $0.metadata["attempt"] } == ["1", "2", "3", "4", "5"])
        #expect(failures.map { $0.metadata["retry-in"] } == [1, 2, 4, 8, 8].map { "\(Duration.milliseconds($0))" })
        // Warned once; the same failure again only at debug level.
        #expect(failures.map(\.level) == [.warning, .debug, .debug, .debug, .debug])
        if Self.bluetoothSocketsUnsupported {
            #expect(failures[0].message.contains("errno \(EAFNOSUPPORT)"), "\(failures[0].message)")
        }
        await medium.broadcast([])

        run.cancel()
        try await withTimeout(.seconds(10)) { await run.value }
        // The thread is gone and its eventfd closed.
        #expect(medium.shared.withLock { !$0.running && $0.wakeDescriptor == -1 })
    }

    @Test func aSecondRunWhileRunningReturnsAtOnceAndTheMediumRunsAgainAfterStopping() async throws {
        let log = LogCapture()
        let medium = HCIMedium(settings: HCIMedium.Settings(device: Self.device, retryDelay: .milliseconds(1),
                                                            maximumRetryDelay: .milliseconds(2), logger: log.logger))
        let first = Task { await medium.run() }
        let condition = try await withTimeout(.seconds(10)) { () async -> MediumCondition? in
            for await condition in medium.conditionChanges { return condition }
            return nil
        }
        #expect(condition == .unavailable)
        try await withTimeout(.seconds(10)) { await medium.run() }
        first.cancel()
        try await withTimeout(.seconds(10)) { await first.value }

        let again = Task { await medium.run() }
        let attempt = try await withTimeout(.seconds(10)) {
            for await record in log.records where record.message.contains("still") { return true }
            return false
        }
        #expect(attempt)
        again.cancel()
        try await withTimeout(.seconds(10)) { await again.value }
    }

    @Test func aRunCancelledBeforeItStartsReturns() async throws {
        let medium = HCIMedium(settings: HCIMedium.Settings(device: Self.device, logger: LogCapture().logger))
        let run = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            await medium.run()
        }
        try await withTimeout(.seconds(10)) { await run.value }
    }

    @Test func errorsMapToConditions() {
        #expect(HCIError.system("bind", errno: EPERM).condition == .refused)
        #expect(HCIError.system("write", errno: EACCES).condition == .refused)
        #expect(HCIError.system("socket", errno: EAFNOSUPPORT).condition == .unavailable)
        #expect(HCIError.system("HCIGETDEVINFO", errno: ENODEV).condition == .unavailable)
        #expect(HCIError.system("bind", errno: EBUSY).condition == .unavailable)
        #expect(HCIError.system("HCIDEVUP", errno: ERFKILL).condition == .unavailable)
        #expect(HCIError.commandFailed(opcode: 0x200A, status: 0x0C).condition == .unavailable)
        #expect(HCIError.commandTimedOut(opcode: 0x200A).condition == .unavailable)
        #expect(HCIError.invalidDeviceName("eth0").condition == .unavailable)
        #expect("\(HCIError.commandFailed(opcode: 0x200A, status: 0x0C))"
            == "LE Set Advertising Enable failed: Command Disallowed (0x0C)")
    }

    @Test func deviceNames() {
        #expect(HCIMedium.Settings.deviceIndex(named: "hci0") == 0)
        #expect(HCIMedium.Settings.deviceIndex(named: "hci12") == 12)
        for name in ["hci", "hcix", "hci-1", "hci 1", "eth0", "HCI0", "hci65535", "hci99999", "hci١"] {
            #expect(HCIMedium.Settings.deviceIndex(named: name) == nil, "\(name)")
        }
    }

    /// sizeof(struct hci_filter) in C: u32 type_mask, u32 event_mask[2],
    /// u16 opcode, and two bytes of tail padding.
    @Test func theFilterOptionHasTheKernelsLength() {
        #expect(HCISocket.filterLength == 16)
    }

    @Test func pollTimeoutsRoundUp() {
        #expect(HCISocket.pollTimeout(until: nil) == -1)
        #expect(HCISocket.pollTimeout(until: .now - .seconds(1)) == 0)
        let timeout = HCISocket.pollTimeout(until: .now + .microseconds(1500))
        #expect(timeout == 2 || timeout == 1)
        #expect(HCISocket.pollTimeout(until: .now + .seconds(3)) <= 3000)
        #expect(HCISocket.pollTimeout(until: .now + .seconds(3)) > 2900)
    }
}

// MARK: Helpers

struct TimedOut: Error {}

/// `body`'s result, or TimedOut after `limit` (then `body` is cancelled).
/// The limit is a safety net for a failing test, not a synchronisation.
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async -> T) async throws -> T {
    let work = Task { await body() }
    let outcome = OneShot<T?>()
    let waiter = Task { outcome.resolve(await work.value) }
    let timer = Task {
        try? await Task.sleep(for: limit)
        outcome.resolve(nil)
    }
    let result = await outcome.value
    timer.cancel()
    work.cancel()
    _ = waiter
    guard let result else { throw TimedOut() }
    return result
}

/// A value set once, awaited once.
final class OneShot<T: Sendable>: Sendable {
    private let state = Mutex<(value: T?, waiter: CheckedContinuation<T, Never>?)>((nil, nil))

    func resolve(_ value: T) {
        let waiter = state.withLock { state -> CheckedContinuation<T, Never>? in
            guard state.value == nil else { return nil }
            state.value = value
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: value)
    }

    var value: T {
        get async {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> T? in
                    if let value = state.value { return value }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }
}

/// A logger whose records can be awaited.
final class LogCapture: Sendable {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    let records: AsyncStream<Record>
    private let sink: AsyncStream<Record>.Continuation

    init() {
        (records, sink) = AsyncStream.makeStream()
    }

    var logger: Logger {
        let sink = sink
        var logger = Logger(label: "hci-test") { _ in Handler(sink: sink) }
        logger.logLevel = .trace
        return logger
    }

    struct Handler: LogHandler {
        let sink: AsyncStream<Record>.Continuation
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        var metadataProvider: Logger.MetadataProvider?

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            sink.yield(Record(level: event.level, message: "\(event.message)",
                              metadata: merged.mapValues { "\($0)" }))
        }
    }
}

@Suite struct HCIBeaconTests {
    @Test func beaconsInReportsAreHeardWithTheirSender() throws {
        let frame = try BeaconFrame(kind: .eddystoneUID, text: "8b0ca750095477cb3e77/331122334455", powerAtOneMetre: -59)
        let address = try #require(DeviceAddress(littleEndian: [6, 5, 4, 3, 2, 1]))
        let report = AdvertisingReport(eventType: 3, addressType: 1, address: address, data: frame.advertisingData, rssi: -70)
        #expect(HCIMedium.beaconSighting(from: report) == BeaconSighting(frame: frame, sender: "\(address)", rssi: -70))
        // Without an RSSI, the beacon is taken to be 1 m away.
        var silent = report
        silent.rssi = nil
        #expect(HCIMedium.beaconSighting(from: silent)?.rssi == -59)
        // A token frame or a malformed beacon is no beacon.
        var other = report
        other.data = Array(frame.advertisingData.dropLast())
        #expect(HCIMedium.beaconSighting(from: other) == nil)
    }
}
