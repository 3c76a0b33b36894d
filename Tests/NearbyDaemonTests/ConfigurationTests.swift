import ConfigFile
import DaemonCore
import NearbyAir
import NearbyCore
import NearbyDaemon
import Testing

@Suite struct DaemonConfigurationTests {
    func parse(_ text: String) throws(ConfigurationError) -> DaemonConfiguration {
        try DaemonConfiguration().applying(ConfigFile(text: text, source: "test.conf"))
    }

    @Test func everySectionIsRead() throws {
        let configuration = try parse("""
            [daemon]
            bus = "session"
            state-directory = "/tmp/state"
            log-level = "debug"
            [server]
            url = "https://nearby.example:8443"
            reconnect-initial-delay = 0.5
            reconnect-max-delay = 60
            request-timeout = 3
            [discovery]
            lost-timeout = 2
            refresh-interval = 1.5
            [limits]
            max-clients = 10
            max-managers-per-client = 2
            max-objects-per-manager = 50
            oversized-call-share = 0.1
            [ble]
            backend = "off"
            tx-power = -65
            adapter = "hci1"
            bluez-bus = "unix:path=/tmp/bluez-bus"
            hci-channel = "user"
            [audio]
            backend = "alsa"
            capture-pcm = "hw:1,0"
            playback-pcm = "plughw:1,0"
            alsa-config = "/etc/nearbyd/asound.conf"
            volume = -12
            reference-level = -30
            interval = 1.5
            lost-timeout = 6
            threshold = 20
            [beacons]
            lost-timeout = 5
            cache-ttl = 60
            signal-interval = 0.5
            max-beacons = 64
            [upstream]
            max-pending = 20
            [sim]
            air-socket = "/tmp/air.sock"
            device = "kiosk"
            position = [1, 2.5]
            """)
        #expect(configuration.bus == .session)
        #expect(configuration.stateDirectory == "/tmp/state")
        #expect(configuration.logLevel == .debug)
        #expect(configuration.serverURLs == ["https://nearby.example:8443"])
        #expect(configuration.lostTimeout == 2)
        #expect(configuration.limits.maxObjectsPerManager == 50)
        #expect(configuration.oversizedCallShare == 0.1)
        #expect(configuration.ble == .off && configuration.enabledMediums == [.audio])
        #expect(configuration.audio == .alsa && configuration.capturePCM == "hw:1,0" && configuration.playbackPCM == "plughw:1,0")
        #expect(configuration.alsaConfig == "/etc/nearbyd/asound.conf")
        #expect(configuration.audioVolume == -12 && configuration.audioReferenceLevel == -30)
        #expect(configuration.audioInterval == 1.5 && configuration.audioLostTimeout == 6 && configuration.audioThreshold == 20)
        #expect(configuration.bleTxPower == -65)
        #expect(configuration.bleAdapter == "hci1")
        #expect(configuration.bluezBus == .address("unix:path=/tmp/bluez-bus"))
        #expect(configuration.hciChannel == .user)
        #expect(configuration.simPosition == Position(x: 1, y: 2.5))
        #expect(configuration.simDevice == "kiosk")
        #expect(configuration.beaconLostTimeout == 5 && configuration.beaconCacheTTL == 60)
        #expect(configuration.beaconSignalInterval == 0.5 && configuration.maxBeacons == 64)
        #expect(configuration.maxPendingUpstream == 20)
    }

    @Test func anEmptyFileMeansTheDefaults() throws {
        let configuration = try parse("")
        #expect(configuration.bus == .system)
        #expect(configuration.ble == .bluez && configuration.bleAdapter == nil && configuration.bluezBus == .system)
        #expect(configuration.lostTimeout == 3)
        #expect(configuration.enabledMediums == [.ble])
        #expect(configuration.audio == .off && configuration.capturePCM == "default" && configuration.audioInterval == 2)
    }

    @Test(arguments: [
        ("[daemon]\nbus_name = \"x\"", "unknown key 'bus_name' in [daemon]"),
        ("[network]\nx = 1", "unknown section [network]"),
        ("[discovery]\nlost-timeout = \"3s\"", "[discovery] lost-timeout must be a number"),
        ("[discovery]\nlost-timeout = 0", "lost-timeout is 0.0; it must be between"),
        ("[limits]\nmax-clients = 1.5", "max-clients must be an integer"),
        ("[ble]\nbackend = \"bluetooth\"", "backend must be one of off, sim, bluez, hci"),
        ("[ble]\nadapter = \"hci-1\"", "adapter must be an adapter name such as hci0"),
        ("[audio]\nbackend = \"bluez\"", "backend must be one of off, sim, alsa"),
        ("[ble]\nbackend = \"alsa\"", "backend must be one of off, sim, bluez, hci"),
        ("[audio]\nvolume = 3", "[audio] volume is 3.0; it must be between -60.0 and 0.0"),
        ("[audio]\ninterval = 0.1", "[audio] interval is 0.1"),
        ("[audio]\ncapture-pcm = \"\"", "[audio] PCM names must not be empty"),
        ("[ble]\nhci-channel = \"monitor\"", "hci-channel must be one of raw, user"),
        ("[server]\nurl = \"ftp://x\"", "must be an http:// or https:// URL"),
        ("[sim]\nposition = [1]", "position must be [x, y]"),
        ("[daemon]\nlog-level = \"loud\"", "log-level must be one of"),
        ("[daemon\nbus = 1", "line 1"),
        ("[beacons]\nmax-beacons = 0", "[beacons] max-beacons is 0.0; it must be between 1.0 and 100000.0"),
        ("[beacons]\nsignal-interval = 0", "[beacons] signal-interval is 0.0"),
        ("[beacons]\ncache-ttl = 1e9", "[beacons] cache-ttl is"),
        ("[upstream]\nmax-pending = 0", "[upstream] max-pending is 0.0"),
        ("[limits]\nmax-clients = 10\nmax-clients-per-user = 11", "[limits] max-clients-per-user is 11.0; it must be between 1.0 and 10.0"),
        ("[limits]\nmax-objects = 100\nmax-objects-per-user = 101", "[limits] max-objects-per-user is 101.0"),
        ("[limits]\nmax-objects-per-user = 10\nmax-objects-per-manager = 11", "[limits] max-objects-per-manager is 11.0"),
        ("[limits]\nmax-managers-per-client = 8\nmax-managers-per-user = 7", "[limits] max-managers-per-user is 7.0"),
        ("[limits]\nmax-api-keys-per-user = 0", "[limits] max-api-keys-per-user is 0.0"),
        ("[limits]\noversized-call-share = 0", "[limits] oversized-call-share is 0.0; it must be between 0.001 and 1.0"),
        ("[limits]\noversized-call-share = 1.5", "[limits] oversized-call-share is 1.5"),
        ("[upstream]\nmax-pending = 10\nmax-per-user = 9", "[upstream] max-per-user is 9.0"),
        ("[upstream]\nmax-pending = 5\nmax-per-user = 10\nmax-total = 9", "[upstream] max-total is 9.0"),
        ("[upstream]\nverdict-retention-days = 0", "[upstream] verdict-retention-days is 0.0"),
        ("[server]\nrefused-key-retry = 0", "[server] refused-key-retry is 0.0"),
        ("[server]\nrefused-change-retry = 0", "[server] refused-change-retry is 0.0"),
        ("[server]\nurl = \"https://192.0.2.7:8443\"", "over https:// name the server by its host name"),
        ("[server]\nurl = \"https://[2001:db8::7]:8443\"", "over https:// name the server by its host name"),
        ("[server]\nurl = \"http://127.0.0.1:8080\"\nca-file = \"/etc/ssl/certs/ca-certificates.crt\"", "[server] ca-file is for an https:// url"),
        ("[server]\nurl = []", "[server] url lists 0 URLs; it takes 1 to 16"),
        ("[server]\nurl = 8080", "[server] url must be a string or an array of strings"),
        ("[server]\nurl = [\"http://a.example\", 8080]", "[server] url must be a string or an array of strings"),
        ("[server]\nurl = [\"https://a.example\", \"ftp://b.example\"]", "[server] url 'ftp://b.example' must be an http:// or https:// URL"),
        ("[server]\nurl = [\"https://a.example\", \"https://192.0.2.7\"]", "[server] url 'https://192.0.2.7': over https:// name the server"),
        ("[server]\nurl = [\"https://a.example\", \"http://b.example\"]", "[server] url mixes http:// and https:// URLs"),
        ("[server]\nurl = [\"http://a.example\", \"http://b.example/\", \"http://b.example\"]", "[server] url lists 'http://b.example' twice"),
    ])
    func mistakesAreNamed(_ text: String, _ complaint: String) {
        #expect {
            _ = try parse(text)
        } throws: { error in
            "\(error)".contains(complaint) && "\(error)".hasPrefix("test.conf")
        }
    }

    /// `[server] url` takes one URL or a list of replicas, up to the bound, in the order given.
    @Test func theServerURLIsOneOrAList() throws {
        #expect(try parse("[server]\nurl = \"http://a.example:8080\"").serverURLs == ["http://a.example:8080"])
        let list = try parse("""
            [server]
            url = ["https://a.example:8443", "https://b.example:8443"]
            ca-file = "/etc/nearbyd/server-ca.pem"
            """)
        #expect(list.serverURLs == ["https://a.example:8443", "https://b.example:8443"])
        let most = (1...DaemonConfiguration.maxServerURLs).map { "\"http://replica\($0).example\"" }
        #expect(try parse("[server]\nurl = [\(most.joined(separator: ", "))]").serverURLs.count == 16)
        let error = #expect(throws: ConfigurationError.self) {
            try parse("[server]\nurl = [\((most + ["\"http://one-too-many.example\""]).joined(separator: ", "))]")
        }
        #expect(error?.message == "test.conf: [server] url lists 17 URLs; it takes 1 to 16")
    }

    /// Per-user limits: each at its edge, and one left out follows the daemon-wide limit it must fit in.
    @Test func perUserLimitsFitTheDaemonsAndFollowThemWhenLeftOut() throws {
        let defaults = try parse("")
        #expect(defaults.limits == RegistryLimits())
        // Where `nearby-air serve` listens when started alike: the two meet without settings.
        #expect(defaults.airSocket == AirSocket.defaultPath())
        let lowered = try parse("[limits]\nmax-clients = 10\nmax-objects = 100\nmax-managers-per-client = 300")
        #expect(lowered.limits.maxClientsPerUser == 10 && lowered.limits.maxObjectsPerUser == 100)
        #expect(lowered.limits.maxObjectsPerManager == 100 && lowered.limits.maxManagersPerUser == 300)
        let smallOutbox = try parse("[upstream]\nmax-total = 50")
        #expect(smallOutbox.maxUpstreamPerUser == 50 && smallOutbox.maxPendingUpstream == 50)
        let edges = try parse("""
            [limits]
            max-clients = 10
            max-clients-per-user = 10
            max-objects = 100
            max-objects-per-user = 100
            max-objects-per-manager = 100
            max-managers-per-client = 8
            max-managers-per-user = 8
            max-api-keys-per-user = 1
            [upstream]
            max-pending = 10
            max-per-user = 10
            max-total = 10
            verdict-retention-days = 0.01
            [server]
            refused-key-retry = 1
            refused-change-retry = 0.1
            """)
        #expect(edges.limits == RegistryLimits(maxClientsPerUser: 10, maxClients: 10, maxManagersPerClient: 8, maxManagersPerUser: 8,
                                               maxAPIKeysPerUser: 1, maxObjectsPerManager: 100, maxObjectsPerUser: 100, maxObjects: 100))
        #expect(edges.outboxLimits.rowsPerUser == 10 && edges.outboxLimits.rows == 10 && edges.outboxLimits.retentionMs == 864_000)
        #expect(edges.refusedKeyRetry == 1 && edges.refusedChangeRetry == 0.1)
    }

    /// toml++ asserted on these headers (a debug build aborted; config-fuzz).
    @Test(arguments: ["[[[permissions]]]\n", "[=]\n", "[\n", "x = 1\n  [[ #\n"])
    func aHeaderNoNameBeginsIsRefused(text: String) {
        #expect(throws: ConfigurationError.self) { try ConfigFile(text: text, source: "test.conf") }
    }

    /// toml++ asserted that a date-time's `T` is followed by a digit (config-fuzz).
    @Test(arguments: ["[daemon]\nlog-level = 7157-05-27T:0372:00Z\n", "x = 2020-01-01Tx\n", "x = [1,2020-01-01t-]",
                      "x = \"\"\"\\\n\"\"\"\ny = 2020-01-01T:"])
    func aDateTimeWhoseTimeIsNoDigitIsRefused(text: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try ConfigFile(text: text, source: "test.conf") }
        #expect(error?.message.hasSuffix("a date-time's time must begin with a digit") == true)
        #expect(error?.message.contains("line \(text.split(separator: "\n").count):") == true)
    }

    @Test func dateTimesInsideStringsAndCommentsAreText() throws {
        let file = try ConfigFile(text: #"""
            # 2020-01-01T: a comment
            [a]
            s = "2020-01-01T:00 \" 2020-01-01Tx"
            l = '2020-01-01T:'
            m = """
            2020-01-01T:""""
            n = '''2020-01-01T:'''
            d = 2020-01-01T07:32:00Z
            """#, source: "test.conf")
        #expect(try file.section("a", keys: ["s", "l", "m", "n", "d"]).string("l") == "2020-01-01T:")
    }

    @Test func bracketsInsideArraysAndStringsAreNoHeaders() throws {
        try ConfigFile(text: "[a]\nx = [\n[\n+1]]\ns = \"\"\"\n[=\n\"\"\"\n", source: "test.conf").checkSections(["a"])
    }

    /// nearbyd's --server replaces the file's url before the two are checked
    /// together: a file's ca-file goes with an https:// server given on the
    /// command line, and still not with a plain one.
    @Test func aFilesCAFileIsCheckedAgainstTheServerInTheEnd() throws {
        let file = try ConfigFile(text: "[server]\nca-file = \"/etc/nearbyd/server-ca.pem\"", source: "test.conf")
        #expect(throws: ConfigurationError.self) { try DaemonConfiguration().applying(file) }
        var configuration = try DaemonConfiguration().applying(file, validating: false)
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.serverURLs = ["https://nearby.example:8443"]
        try configuration.validate()
    }

    @Test func aMissingFileIsAnErrorOnlyWhenNamed() throws {
        #expect(throws: ConfigurationError.self) { try DaemonConfiguration.load(path: "/nonexistent/nearbyd.conf", required: true) }
        #expect(try DaemonConfiguration.load(path: "/nonexistent/nearbyd.conf", required: false).bus == .system)
    }
}
