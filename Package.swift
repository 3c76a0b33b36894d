// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "nearbyd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "nearbyd", targets: ["nearbyd"]),
        .executable(name: "nearby-server", targets: ["nearby-server"]),
        .executable(name: "nearby-air", targets: ["nearby-air"]),
        .executable(name: "nearbyctl", targets: ["nearbyctl"]),
        .executable(name: "nearby-modem", targets: ["nearby-modem"]),
        .executable(name: "nearby-bench", targets: ["nearby-bench"]),
        .library(name: "NearbyMessages", targets: ["NearbyMessages"]),
        .library(name: "DBus", targets: ["DBus"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.20.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.25.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.20.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.6.0"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", from: "1.6.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.30.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.10.0"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.0.0"),
    ],
    targets: [
        // C: the systemd headers (sd-bus, sd-event, sd-daemon, sd-journal) and the
        // vtable builder that the SD_BUS_* macros cannot provide to Swift.
        .target(
            name: "CSystemd",
            linkerSettings: [.linkedLibrary("systemd")]
        ),
        .target(name: "DBus", dependencies: ["CSystemd"]),
        // C: glibc's <malloc.h> (mallinfo2, malloc_trim), so nearbyd gives back what large messages took.
        .target(name: "CMalloc"),
        // C: one malloc arena for all threads, set before main (the nearbyd and nearby-server executables only).
        .target(name: "OneMallocArena"),
        .target(
            name: "SystemdService",
            dependencies: ["CSystemd", .product(name: "Logging", package: "swift-log")]
        ),
        // Events anyone can cause at will, logged at most once a minute with a count.
        .target(name: "SummarisedLog", dependencies: [.product(name: "Logging", package: "swift-log")]),
        // nearby-server's partitions of devices and which replica owns each: a core without I/O.
        .target(name: "Partitions"),
        // nearbyd's D-Bus API as data: its names, written once (doc/dbus-api.md describes it).
        .target(name: "NearbyBusContract"),
        .target(name: "NearbyCore", dependencies: ["NearbyBusContract", .product(name: "HeapModule", package: "swift-collections")]),
        // Strict reading of the TOML configuration files of nearbyd and nearby-server.
        .target(name: "DaemonCore", dependencies: ["NearbyBusContract", "NearbyCore", "ServerAPI", .product(name: "Logging", package: "swift-log")]),
        .target(name: "ConfigFile", dependencies: [.product(name: "TOMLKit", package: "TOMLKit")]),
        .target(name: "ServerAPI", dependencies: ["NearbyCore"]),
        .target(
            name: "NearbyAir",
            dependencies: [
                "NearbyCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "BluetoothLE", dependencies: ["NearbyCore"]),
        // BLE beacon frames: Eddystone (UID, URL, TLM, EID) and iBeacon, parsed strictly and built.
        .target(name: "Beacons", dependencies: ["NearbyCore"]),
        // Upstream messages on the device: their rules and the durable outbox.
        .target(name: "Upstream", dependencies: ["NearbyCore", "ServerAPI", .product(name: "GRDB", package: "GRDB.swift")]),
        // libFuzzer harness of the beacon parsers (Sources/BeaconsFuzz/README.md); a plain
        // build replays inputs.
        .executableTarget(
            name: "beacons-fuzz",
            dependencies: ["Beacons", "FuzzReplay"],
            path: "Sources/BeaconsFuzz",
            exclude: ["beacons.dict", "README.md"]
        ),
        // What the fuzz harnesses share: the declaration of libFuzzer's driver
        // (C), and the replay of inputs in plain builds.
        .target(name: "FuzzDriver"),
        .target(name: "FuzzReplay", dependencies: ["FuzzDriver"]),
        // libFuzzer harnesses of the connection server's parsers of outside input
        // (Sources/XMPPFuzz/README.md, Sources/CCSFuzz/README.md); plain builds replay inputs.
        .executableTarget(
            name: "xmpp-fuzz",
            dependencies: [
                "XMPP", "FuzzReplay",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/XMPPFuzz",
            exclude: ["xmpp.dict", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "ccs-fuzz",
            dependencies: ["NearbyServer", "FuzzReplay"],
            path: "Sources/CCSFuzz",
            exclude: ["ccs.dict", "README.md", "corpus"]
        ),
        // libFuzzer harnesses of the other parsers of outside input (each
        // Sources/*Fuzz/README.md): nearby-server's request bodies and query
        // strings, text on its way to both storage engines (storage-fuzz
        // starts a throwaway PostgreSQL cluster), nearby-air's connections, HCI events, nearbyd's D-Bus
        // arguments, the configuration and static publication files, and the
        // audio demodulator; plain builds replay inputs.
        .executableTarget(
            name: "server-fuzz",
            dependencies: ["NearbyServer", "FuzzReplay"],
            path: "Sources/ServerFuzz",
            exclude: ["server.dict", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "storage-fuzz",
            dependencies: ["NearbyServer", "FuzzReplay", "TestSupport"],
            path: "Sources/StorageFuzz",
            exclude: ["storage.dict", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "air-fuzz",
            dependencies: ["NearbyAir", "FuzzReplay"],
            path: "Sources/AirFuzz",
            exclude: ["air.dict", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "hci-fuzz",
            dependencies: ["BluetoothHCI", "FuzzReplay"],
            path: "Sources/HCIFuzz",
            exclude: ["hci.dict", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "dbus-fuzz",
            dependencies: ["NearbyDaemon", "DBus", "FuzzReplay"],
            path: "Sources/DBusFuzz",
            exclude: ["dbus.dict", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "config-fuzz",
            dependencies: ["NearbyDaemon", "NearbyServer", "ConfigFile", "NearbyCore", "FuzzReplay"],
            path: "Sources/ConfigFuzz",
            exclude: ["config.dict", "lsan.supp", "README.md", "corpus"]
        ),
        .executableTarget(
            name: "modem-fuzz",
            dependencies: ["AudioModem", "NearbyCore", "FuzzReplay"],
            path: "Sources/ModemFuzz",
            exclude: ["README.md", "corpus"]
        ),
        // C: libasound, for playback and capture.
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .target(name: "ALSA", dependencies: ["CALSA"]),
        // Pure DSP: the near-ultrasonic token modem, no I/O. Optimised in debug
        // builds too: unoptimised, demodulating one daemon's microphone takes
        // most of a core, which starves the tests and debug daemons around it.
        .target(
            name: "AudioModem",
            dependencies: ["NearbyCore"],
            swiftSettings: [.unsafeFlags(["-O"], .when(configuration: .debug))]
        ),
        // The audio medium: the modem on a sound card (ALSA) or in nearby-air.
        .target(
            name: "AudioMedium",
            dependencies: ["AudioModem", "ALSA", "Mediums", "NearbyAir", "NearbyCore", .product(name: "Logging", package: "swift-log")]
        ),
        // C: libbluetooth's HCI headers, for the raw-HCI BLE backend.
        .systemLibrary(name: "CBluetooth", pkgConfig: "bluez", providers: [.apt(["libbluetooth-dev"])]),
        .target(
            name: "BluetoothHCI",
            dependencies: [
                "Beacons", "CBluetooth", "BluetoothLE", "Mediums", "NearbyCore",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "Mediums",
            dependencies: ["Beacons", "NearbyCore", "NearbyAir", .product(name: "Logging", package: "swift-log")]
        ),
        // BLE through bluetoothd on the system bus.
        .target(
            name: "BlueZ",
            dependencies: ["Beacons", "DBus", "BluetoothLE", "Mediums", "NearbyCore", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "NearbyServer",
            dependencies: [
                "SummarisedLog", "Partitions",
                "NearbyCore", "ServerAPI", "ConfigFile", "XMPP",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "NearbyDaemon",
            dependencies: [
                "Beacons", "DBus", "DaemonCore", "NearbyCore", "ServerAPI", "Mediums", "BlueZ", "Upstream", "BluetoothHCI", "AudioMedium", "AudioModem", "ALSA",
                "SystemdService", "ConfigFile", "CMalloc", "NearbyBusContract",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .target(name: "NearbyMessages", dependencies: ["DBus", "NearbyBusContract"]),
        // C: libxml2's SAX2 push parser, for XMPP's XML stream.
        .systemLibrary(name: "CLibXML2", pkgConfig: "libxml-2.0", providers: [.apt(["libxml2-dev"])]),
        // An XMPP server in the shape of FCM's XMPP connection server: direct TLS,
        // SASL PLAIN, resource binding, stanzas to a service.
        .target(
            name: "XMPP",
            dependencies: [
                "SummarisedLog",
                "CLibXML2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        .executableTarget(
            name: "nearbyd",
            dependencies: [
                "NearbyDaemon", "SystemdService", "ConfigFile", "OneMallocArena",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "nearby-server",
            dependencies: [
                "NearbyServer", "ServerAPI", "SystemdService", "ConfigFile", "XMPP", "OneMallocArena",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "nearby-air",
            dependencies: [
                "Beacons", "NearbyAir", "SystemdService",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "nearbyctl",
            dependencies: [
                "NearbyMessages",
                "DBus",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "nearby-modem",
            dependencies: ["AudioModem", "NearbyCore", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // examples/chat.py's twin on the Swift library; SwiftExampleTests runs it.
        .executableTarget(
            name: "chat-example",
            dependencies: ["NearbyMessages", "DBus", .product(name: "UnixSignals", package: "swift-service-lifecycle")],
            path: "examples/swift-chat"
        ),
        // Opens one PCM and prints the outcome; ALSATests run it under another uid.
        .executableTarget(name: "alsa-probe", dependencies: ["ALSA"]),
        // Benchmarks: the real programs in a simulated cluster, against reference
        // programs measured in the same run (bench/reference, ../shared/bench).
        .executableTarget(
            name: "nearby-bench",
            dependencies: [
                "NearbyMessages", "DBus", "TestSupport", "nearby-load",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "bench",
            exclude: ["nearby-load", "reference", "modem-compare", "ccs_appserver.py", "nearbyd_calls.py", "soak_clients.py", "soak_devices.py",
                      "isolation_load.py", "server_load.py"]
        ),

        // The load generator of `nearby-bench server`: simulated devices on
        // SwiftNIO that speak nearby-server's device API.
        .executableTarget(
            name: "nearby-load",
            dependencies: [
                "ServerAPI", "NearbyCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "bench/nearby-load"
        ),

        // Helpers for tests that start real processes: a private dbus-daemon,
        // child processes with their output, timeouts.
        .target(
            name: "TestSupport",
            dependencies: ["DBus", .product(name: "Subprocess", package: "swift-subprocess")],
            path: "Tests/TestSupport",
            exclude: ["python"]
        ),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "TestSupport"]),
        .testTarget(name: "DaemonCoreTests", dependencies: ["DaemonCore", "NearbyBusContract", "NearbyCore", "ServerAPI", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "NearbyCoreTests", dependencies: ["NearbyCore", "NearbyBusContract"]),
        .testTarget(name: "PartitionsTests", dependencies: ["Partitions", "NearbyCore"]),
        .testTarget(name: "BluetoothLETests", dependencies: ["BluetoothLE", "NearbyCore"]),
        .testTarget(name: "AudioModemTests", dependencies: ["AudioModem", "NearbyCore"]),
        .testTarget(name: "BeaconsTests", dependencies: ["Beacons", "NearbyCore"]),
        .testTarget(name: "ALSATests", dependencies: ["ALSA", "alsa-probe", "AudioModem", "NearbyCore"]),
        .testTarget(
            name: "AudioMediumTests",
            dependencies: ["AudioMedium", "Mediums", "NearbyCore", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "Beacons", "BluetoothLE", "DBus", "NearbyCore"]),
        .testTarget(name: "BluetoothHCITests", dependencies: ["BluetoothHCI", "Beacons", "BluetoothLE", "NearbyCore", "Mediums"]),
        .testTarget(
            name: "SystemdServiceTests",
            dependencies: ["SystemdService", "TestSupport", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(name: "NearbyAirTests", dependencies: ["NearbyAir"]),
        .testTarget(
            name: "NearbyServerTests",
            dependencies: [
                "NearbyServer", "ServerAPI", "ConfigFile", "TestSupport", "SummarisedLog",
                // The benchmark's generator, run against a real server (LoadGeneratorTests).
                "nearby-load",
                // The migration's tests read both engines' schemas and rows directly.
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSTesting", package: "hummingbird-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .testTarget(name: "NearbyDaemonTests", dependencies: [
            "NearbyDaemon", "DaemonCore", "NearbyBusContract", "Beacons", "ConfigFile", "Mediums", "NearbyAir", "DBus", "ServerAPI", "TestSupport",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "UpstreamTests", dependencies: ["Upstream", "NearbyCore", "ServerAPI", .product(name: "GRDB", package: "GRDB.swift")]),
        .testTarget(
            name: "XMPPTests",
            dependencies: [
                // The flood test runs the real nearby-server (in a Cluster, with nearby-air).
                "XMPP", "TestSupport", "nearby-server", "nearby-air",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["python"]
        ),
        // Starts the real programs: the executables are dependencies so that they are built.
        .testTarget(
            name: "EndToEndTests",
            dependencies: ["NearbyMessages", "NearbyBusContract", "DBus", "TestSupport", "nearbyd", "nearby-server", "nearby-air", "nearbyctl",
                           "chat-example"],
            exclude: ["python"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
