import ALSA
import AudioMedium
import BlueZ
import BluetoothHCI
import CMalloc
import DBus
import Foundation
import Logging
import Mediums
import NearbyBusContract
import NearbyCore
import NIOSSL
import ServiceLifecycle
import SystemdService
import UnixSignals
import Upstream

/// nearbyd as a service of its process: connects to the bus, exports the API,
/// takes the name `org.nearbyd`, and runs until a shutdown signal or the bus
/// going away; then ends every client's objects and leaves.
public struct Daemon: Service {
    public static let busName = NearbyBusContract.busName

    let configuration: DaemonConfiguration
    let logger: Logger

    public init(configuration: DaemonConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    public func run() async throws {
        let trimming = Self.giveBackFreedMemory(logger: logger)
        defer { trimming.cancel() }
        try FileManager.default.createDirectory(atPath: configuration.stateDirectory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let (busLost, busLostSignal) = AsyncStream.makeStream(of: Void.self)
        let service = try await start(onBusLost: { busLostSignal.yield() })
        // Before the name is taken: whoever finds the name finds them published.
        await service.reloadStaticPublications()
        try await service.connection.requestName(Self.busName)
        // SIGHUP (systemctl reload) reads the static publications again; trapped
        // before the daemon says it is ready, as its default action is to end it.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let uniqueName = await service.connection.uniqueName
        logger.info("nearbyd \(DaemonService.version) ready", metadata: ["bus": "\(configuration.bus)", "name": "\(uniqueName)"])
        FileHandle.standardOutput.write(Data("nearbyd: ready on \(configuration.bus) as \(uniqueName)\n".utf8))
        let status = "serving \(Self.busName) on the \(configuration.bus)"
        ServiceNotifier.ready(status: status)
        let reloads = Task {
            for await _ in hangups {
                ServiceNotifier.reloading()
                await service.reloadStaticPublications()
                ServiceNotifier.ready(status: status)
            }
        }
        defer { reloads.cancel() }

        // Until SIGTERM/SIGINT (the service group's graceful shutdown) or the bus goes away.
        let lostTheBus = await withGracefulShutdownHandler {
            for await _ in busLost { return true }
            return false
        } onGracefulShutdown: {
            busLostSignal.finish()
        }
        ServiceNotifier.stopping()
        logger.info("nearbyd stopping")
        await service.stop(grace: .seconds(2))
        await service.connection.close()
        if lostTheBus { throw DaemonError.busLost }
    }

    /// sd-bus reads each message whole, and glibc keeps what a large one took
    /// for the next (it raises its mmap and trim thresholds after freeing a
    /// large block): a flood of large messages then costs no page faults
    /// each (returning each at once tripled what nearbyd spent per message,
    /// all in the kernel), but would stay resident for good. So what is free
    /// is given back once the flood is over: checked every five seconds, off
    /// the bus thread. `malloc_trim` gives back the top of the main arena
    /// only: the nearbyd executable makes it the only one (OneMallocArena).
    private static func giveBackFreedMemory(logger: Logger) -> Task<Void, Never> {
        Task.detached(priority: .background) {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(5))
                let free = mallinfo2().fordblks
                guard free > 16 << 20 else { continue }
                malloc_trim(0)
                logger.info("freed memory given back", metadata: ["MiB": "\(free >> 20)"])
            }
        }
    }

    /// Why the daemon stopped other than by request.
    enum DaemonError: Error, CustomStringConvertible {
        case busLost
        case outbox(String)
        case serverTLS(String)

        var description: String {
            switch self {
            case .busLost: "the connection to the bus was lost"
            case .outbox(let reason): "cannot open the upstream outbox in the state directory: \(reason)"
            case .serverTLS(let reason): reason
            }
        }
    }

    @BusActor
    private func start(onBusLost: @escaping @Sendable () -> Void) throws -> DaemonService {
        let connection = try BusConnection(configuration.bus)
        try connection.paceOversizedCalls(
            OversizedCallBudget(share: configuration.oversizedCallShare),
            refusal: NearbyError.limitExceeded(
                "this connection's calls are several MiB each, more than nearbyd reads in a second "
                    + "([limits] oversized-call-share); this one was not run").dbusError)
        connection.onDisconnect {
            logger.error("the connection to the bus was lost")
            onBusLost()
        }
        let outbox: Outbox
        do {
            outbox = try UpstreamService.openOutbox(stateDirectory: configuration.stateDirectory, limits: configuration.outboxLimits)
        } catch {
            throw DaemonError.outbox("\(error)")
        }
        let serverTLS: TLSConfiguration?
        do {
            // The URLs share one scheme (DaemonConfiguration), so one configuration serves them all.
            serverTLS = try ServerTLS.configuration(url: configuration.serverURLs[0], caFile: configuration.serverCAFile)
        } catch {
            throw DaemonError.serverTLS(error.message)
        }
        // One clock for the service and the mediums' sightings.
        let clock = SystemWallClock()
        let service = DaemonService(configuration: configuration, connection: connection, backends: makeBackends(clock: clock),
                                    serverTLS: serverTLS, outbox: outbox, sessions: loginSessions(clients: connection), clock: clock,
                                    logger: logger)
        try service.start()
        return service
    }

    /// logind where `[daemon] logind-bus` says: the clients' bus itself when it is the
    /// same, a connection of its own otherwise, or none.
    @BusActor
    private func loginSessions(clients: BusConnection) -> LoginSessions {
        guard let address = configuration.logindBus else { return LoginSessions(logind: nil, clients: clients, logger: logger) }
        if address == configuration.bus { return LoginSessions(logind: clients, clients: clients, logger: logger) }
        do {
            return LoginSessions(logind: try BusConnection(address), clients: clients, logger: logger)
        } catch {
            return LoginSessions(logind: nil, clients: clients, logger: logger,
                                 whyNoBus: "cannot connect to the \(address): \(error.message)")
        }
    }

    @BusActor
    private func makeBackends(clock: any WallClock) -> [any MediumBackend] {
        bleBackends(clock: clock) + audioBackends(clock: clock)
    }

    @BusActor
    private func audioBackends(clock: any WallClock) -> [any MediumBackend] {
        let device: any SoundDevice
        switch configuration.audio {
        case .alsa:
            device = ALSASoundDevice(
                capture: PCMConfiguration(pcm: configuration.capturePCM, configFile: configuration.alsaConfig),
                playback: PCMConfiguration(pcm: configuration.playbackPCM, configFile: configuration.alsaConfig))
        case .sim:
            // With BLE in the air too, the BLE medium attaches the device.
            device = AirSoundDevice(socketPath: configuration.airSocket, device: configuration.simDevice,
                                    attachAt: configuration.ble == .sim ? nil : configuration.simPosition)
        default:
            return []
        }
        let settings = AudioMedium.Settings(volume: configuration.audioVolume, referenceLevel: configuration.audioReferenceLevel,
                                            interval: .milliseconds(Int64(configuration.audioInterval * 1000)),
                                            threshold: configuration.audioThreshold)
        return [AudioMedium(device: device, settings: settings, logger: logger, clock: clock)]
    }

    @BusActor
    private func bleBackends(clock: any WallClock) -> [any MediumBackend] {
        switch configuration.ble {
        case .off, .alsa:
            return []
        case .sim:
            let settings = SimulatedMedium.Settings(socketPath: configuration.airSocket, device: configuration.simDevice,
                                                    position: configuration.simPosition, txPower: configuration.bleTxPower)
            return [SimulatedMedium(medium: .ble, settings: settings, logger: logger, clock: clock)]
        case .bluez:
            let settings = BlueZMedium.Settings(bus: configuration.bluezBus, adapter: configuration.bleAdapter,
                                                txPower: configuration.bleTxPower,
                                                lostTimeout: .milliseconds(Int64(configuration.lostTimeout * 1000)))
            return [BlueZMedium(settings: settings, logger: logger, clock: clock)]
        case .hci:
            let settings = HCIMedium.Settings(device: configuration.bleAdapter ?? "hci0", channel: configuration.hciChannel,
                                              txPower: configuration.bleTxPower, logger: logger)
            return [HCIMedium(settings: settings, clock: clock)]
        }
    }
}
