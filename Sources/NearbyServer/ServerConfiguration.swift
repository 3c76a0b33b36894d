import ConfigFile
import Foundation
import ServerAPI

/// Everything `nearby-server` can be told, from its TOML file and then its
/// command line. doc/nearby-server.md describes each key.
public struct ServerConfiguration: Sendable, Equatable {
    /// Where the file is looked for when no `--config` is given.
    public static let defaultPath = "/etc/nearby-server/nearby-server.conf"

    /// `[http] listen`: the address the HTTP and WebSocket API is served on.
    public var listen = ListenAddress(host: "127.0.0.1", port: 8080)
    /// `[http]`'s limits on connections and their requests.
    public var http = HTTP()
    /// `[database] path`: the SQLite database file, the default engine.
    public var databasePath = "/var/lib/nearby-server/nearby.sqlite"
    /// `[database] url`: a PostgreSQL database (`postgres://…`, as
    /// ``PostgresLocation`` reads it) instead of the SQLite file.
    public var databaseURL: String?
    /// `[database] password-file`: a file whose first line is the password of
    /// `url`'s user, for a URL without one (``databasePassword(environment:)``).
    public var databasePasswordFile: String?
    /// `[tokens] lifetime-seconds`: how long an issued token stays valid.
    public var tokenLifetimeSeconds = 600
    /// `[tokens] overlap-seconds`: how long before expiry the device should ask
    /// for the next token, so that two are valid at once.
    public var tokenOverlapSeconds = 60
    /// `[discovery] edge-timeout-seconds`: a sighting its observer does not
    /// refresh for this long is dropped.
    public var edgeTimeoutSeconds = 30
    /// `[limits]`.
    public var limits = Limits()
    /// `[xmpp]`: the connection server's endpoint for application servers.
    public var xmpp = XMPP()
    /// `[replication]`: how replicas sharing a PostgreSQL database divide the devices.
    public var replication = Replication()

    /// How the replicas sharing a PostgreSQL database divide the devices'
    /// partitions among themselves (doc/architecture.md, "Several
    /// nearby-server replicas"). Unused on SQLite, where one server owns them all.
    public struct Replication: Sendable, Equatable {
        /// `advertised-url`: where devices reach this replica, as the others
        /// send them to it (`http://` or `https://`, host and port). Unset:
        /// the API's scheme, this machine's host name when `[http] listen`
        /// is a wildcard address (else its host), and the port it listens on.
        public var advertisedURL: String?
        /// `lease-seconds`: how long a replica's lease on a partition lasts
        /// unless renewed (every third of it): a replica that dies leaves its
        /// partitions to the others this long after.
        public var leaseSeconds = 10

        public init() {}
    }

    /// What one connection to the HTTP API may hold and for how long.
    public struct HTTP: Sendable, Equatable {
        /// `max-connections`: connections at once; beyond, the oldest idle one
        /// is closed, or the new one refused (503) when none is idle. The
        /// default holds 10,000 device streams (about 40 KiB each) with room
        /// for the devices' requests.
        public var maxConnections = HTTP.defaultMaxConnections
        /// Whether `max-connections` was configured. Only the default may be
        /// lowered to fit the descriptors the process may open
        /// (``DescriptorBudget/fittingDefault(_:hardLimit:processors:)``);
        /// a configured value that does not fit stops the server.
        public var maxConnectionsConfigured = false
        /// `max-connections-per-address`: the same for one client address
        /// (an IPv6 client's /64).
        public var maxConnectionsPerAddress = 256
        /// `header-timeout-seconds`: a new connection must send a whole request head within this.
        public var headerTimeoutSeconds = 10
        /// `idle-timeout-seconds`: after a response, the next request head must arrive within this.
        public var idleTimeoutSeconds = 60
        /// `request-timeout-seconds`: from a request's head to the end of its response (body included).
        public var requestTimeoutSeconds = 30
        /// `max-websockets-per-project`: device streams and channels of one
        /// project at once; nil for three quarters of `max-connections`
        /// (``websocketsPerProject``). One beyond is answered 503.
        public var maxWebSocketsPerProject: Int?
        /// `max-request-line-bytes`: a longer request line is answered 414.
        public var maxRequestLineBytes = 8192
        /// `max-header-bytes`: a longer request head (line and header fields) is answered 431.
        public var maxHeaderBytes = 32_768
        /// `certificate` and `private-key`: PEM files. With them the API
        /// (WebSocket streams included) is served over TLS 1.2 or newer
        /// alone, without them over plain HTTP.
        public var certificatePath: String?
        public var privateKeyPath: String?
        /// `proxy-protocol-from`: the load balancers (IP addresses and
        /// prefixes) whose connections begin with a PROXY protocol version 2
        /// header, which names the client; from them the header is required,
        /// from anyone else it is not read. Empty: no header is read.
        public var proxyProtocolFrom: [String] = []

        public static let defaultMaxConnections = 16_384

        /// Whether the API is served over TLS.
        public var usesTLS: Bool { certificatePath != nil }

        /// `max-websockets-per-project`, or its default: three quarters of
        /// `max-connections`, so that one project's devices leave the others
        /// a quarter; one above `max-connections` is `max-connections`.
        public var websocketsPerProject: Int {
            min(maxWebSocketsPerProject ?? max(1, maxConnections * 3 / 4), maxConnections)
        }

        public init() {}
    }

    public struct XMPP: Sendable, Equatable {
        /// `listen`: where application servers connect, TLS from the first byte.
        public var listen = ListenAddress(host: "127.0.0.1", port: 5235)
        /// `domain`: the XMPP domain; application servers log in as
        /// `PROJECT@DOMAIN`, devices address them the same way.
        public var domain = "nearby.local"
        /// `certificate` and `private-key`: PEM files. Without them there is no
        /// XMPP endpoint (devices' channels still work; messages wait).
        public var certificatePath: String?
        public var privateKeyPath: String?
        /// `max-stanza-bytes`: a larger stanza ends the stream (policy-violation).
        public var maxStanzaBytes = 65_536
        /// `max-connections`: authenticated application server connections at
        /// once; a login beyond is refused (resource-constraint).
        public var maxConnections = 1000
        /// `max-connections-per-project`: the same for one project's
        /// application servers (its sender ID), within `max-connections`, so
        /// that one project can never take every place from the others (one
        /// above `max-connections` is `max-connections`).
        public var maxConnectionsPerProject = 100
        /// `max-unauthenticated-connections`: connections not yet logged in at
        /// once; at the limit the slowest makes room for a new one.
        public var maxUnauthenticatedConnections = 256
        /// `max-unauthenticated-connections-per-address`: the same for one
        /// client address (an IPv6 client's /64).
        public var maxUnauthenticatedConnectionsPerAddress = 32
        /// `tls-handshake-timeout-seconds`: from accepting a connection to the
        /// end of its TLS handshake.
        public var tlsHandshakeTimeoutSeconds = 10
        /// `negotiation-timeout-seconds`: from the TLS handshake to a bound
        /// resource (stream header, SASL, bind).
        public var negotiationTimeoutSeconds = 20
        /// `idle-timeout-seconds`: silence of a logged-in connection before the
        /// server pings it.
        public var idleTimeoutSeconds = 120
        /// `ping-timeout-seconds`: how long a pinged connection has to send
        /// anything before it is closed.
        public var pingTimeoutSeconds = 30
        /// `max-unacked-per-connection`: upstream messages and receipts a
        /// connection may have without acking them (CCS: 100), and stanzas
        /// of a connection taken and not yet answered.
        public var maxUnackedPerConnection = 100
        /// `max-pending-downstream-per-device`: messages waiting for a device;
        /// more are refused with DEVICE_MESSAGE_RATE_EXCEEDED.
        public var maxPendingDownstreamPerDevice = 100
        /// `max-pending-receipts-per-project`: delivery receipts kept for a
        /// project's application servers; beyond, the oldest are dropped.
        public var maxPendingReceiptsPerProject = 10_000
        /// `claim-lease-seconds`: how long a replica's claim on an upstream
        /// message or receipt out with one of its connections lasts unless
        /// renewed (every third of it): a replica that dies leaves them to
        /// the others this long after.
        public var claimLeaseSeconds = 30

        public init() {}

        /// Whether the endpoint runs: it has a certificate.
        public var isEnabled: Bool { certificatePath != nil }
    }

    public struct Limits: Sendable, Equatable {
        public var maxBodyBytes = 262_144
        public var maxPublicationsPerDevice = 1024
        public var maxSubscriptionsPerDevice = 256
        public var maxSightingsPerReport = 256
        public var maxChangesPerBatch = 256
        public var maxDevicesPerProject = 100_000
        /// `max-stream-buffer-bytes`: bytes of events a device's stream may
        /// have waiting for its connection before the server closes the stream.
        public var maxStreamBufferBytes = 16 << 20
        /// `snapshot-page-bytes`: about how much message content one page of a
        /// snapshot carries; the next page goes out once this one is written.
        public var snapshotPageBytes = 1 << 20
        /// `max-observations-per-request`: observations in one `beaconinfo:getforobserved`.
        public var maxObservationsPerRequest = 100
        /// `max-namespaced-types-per-request`: namespaced types in one `beaconinfo:getforobserved`.
        public var maxNamespacedTypesPerRequest = 16
        /// `max-query-terms`: terms in the `q` of a beacon listing.
        public var maxQueryTerms = 16
        /// `max-channel-queue`: events a device's direct channel may have
        /// waiting for the device to read them before the server closes it.
        public var maxChannelQueue = 256
        /// `max-upstream-per-device`: upstream messages the connection server
        /// keeps per device, pending or settled (kept to answer a repeat).
        public var maxUpstreamPerDevice = 10_000
        /// `registrations-per-address-per-minute`: devices one client address
        /// (an IPv6 client's /64) may register a minute, as many at once.
        public var registrationsPerAddressPerMinute = 10
        /// `registrations-per-project-per-minute`: devices a project may gain a minute.
        public var registrationsPerProjectPerMinute = 600
        /// `device-idle-days`: a device that has not authenticated for this
        /// long is deleted.
        public var deviceIdleDays = 90
        /// `deleted-device-days`: how long the id of a deleted device is kept,
        /// so that an application server sending to it is told it is gone.
        public var deletedDeviceDays = 30

        public init() {}
    }

    /// The smallest `[limits] max-body-bytes`: nearbyd's largest change batch,
    /// with 512 bytes for each of its changes that its estimate of their size
    /// may miss (the JSON around the content, escapes). This also holds a
    /// publication of the largest content (about 137 KiB as base64 JSON).
    public static let minimumBodyBytes = ClientBatchLimits.maxChangeBatchBytes + ClientBatchLimits.maxChangesPerBatch * 512

    public init() {}

    /// Reads the file at `path`. A missing file is an error only when
    /// `required` (it was named explicitly); otherwise the defaults apply.
    /// A file every user may read is refused when it holds the database's
    /// password (in `[database] url`): the package installs it 0640, group
    /// nearby-server.
    public static func load(path: String, required: Bool) throws(ConfigurationError) -> ServerConfiguration {
        let configuration = try ServerConfiguration().applying(ConfigFile(path: path, required: required))
        if let url = configuration.databaseURL, URLComponents(string: url)?.password != nil {
            try SecretFile.checkNotWorldReadable(path, holding: "the database's password ([database] url)",
                                                 instead: "or move the password to [database] password-file or PGPASSWORD")
        }
        return configuration
    }

    /// The password for `[database] url` when the URL has none: the first
    /// line of `[database] password-file`, else the environment's
    /// `PGPASSWORD`, as libpq reads it; nil for neither. The file is refused
    /// when every user may read it.
    public func databasePassword(environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigurationError) -> String? {
        guard let databaseURL, URLComponents(string: databaseURL)?.password == nil else { return nil }
        guard let databasePasswordFile else { return environment["PGPASSWORD"] }
        return try SecretFile.firstLine(of: databasePasswordFile, what: "[database] password-file")
    }

    /// Parses a TOML document. `source` names it in error messages.
    public static func parse(_ text: String, source: String) throws(ConfigurationError) -> ServerConfiguration {
        try ServerConfiguration().applying(ConfigFile(text: text, source: source))
    }

    /// These settings overridden by what `file` sets.
    public func applying(_ file: ConfigFile) throws(ConfigurationError) -> ServerConfiguration {
        var configuration = self
        try file.checkSections(["http", "database", "tokens", "discovery", "limits", "xmpp", "replication"])
        let http = try file.section("http", keys: [
            "listen", "certificate", "private-key", "max-connections", "max-connections-per-address", "max-websockets-per-project",
            "header-timeout-seconds", "idle-timeout-seconds",
            "request-timeout-seconds", "max-request-line-bytes", "max-header-bytes", "proxy-protocol-from",
        ])
        if let listen = try http.string("listen") {
            configuration.listen = try ListenAddress(parsing: listen, what: "\(file.source): [http] listen")
        }
        if let value = try http.string("certificate") { configuration.http.certificatePath = value }
        if let value = try http.string("private-key") { configuration.http.privateKeyPath = value }
        if let value = try http.integer("max-connections") {
            configuration.http.maxConnections = value
            configuration.http.maxConnectionsConfigured = true
        }
        if let value = try http.integer("max-connections-per-address") { configuration.http.maxConnectionsPerAddress = value }
        if let value = try http.integer("max-websockets-per-project") { configuration.http.maxWebSocketsPerProject = value }
        if let value = try http.integer("header-timeout-seconds") { configuration.http.headerTimeoutSeconds = value }
        if let value = try http.integer("idle-timeout-seconds") { configuration.http.idleTimeoutSeconds = value }
        if let value = try http.integer("request-timeout-seconds") { configuration.http.requestTimeoutSeconds = value }
        if let value = try http.integer("max-request-line-bytes") { configuration.http.maxRequestLineBytes = value }
        if let value = try http.integer("max-header-bytes") { configuration.http.maxHeaderBytes = value }
        if let value = try http.strings("proxy-protocol-from") { configuration.http.proxyProtocolFrom = value }
        let database = try file.section("database", keys: ["path", "url", "password-file"])
        if let value = try database.string("password-file") { configuration.databasePasswordFile = value }
        switch (try database.string("path"), try database.string("url")) {
        case (_?, _?):
            throw ConfigurationError("\(file.source): [database] has both path (a SQLite file) and url (a PostgreSQL database): set one")
        case (let path?, nil):
            configuration.databasePath = path
            configuration.databaseURL = nil
        case (nil, let url?):
            configuration.databaseURL = url
        case (nil, nil):
            break
        }
        let tokens = try file.section("tokens", keys: ["lifetime-seconds", "overlap-seconds"])
        if let value = try tokens.integer("lifetime-seconds") { configuration.tokenLifetimeSeconds = value }
        if let value = try tokens.integer("overlap-seconds") { configuration.tokenOverlapSeconds = value }
        let discovery = try file.section("discovery", keys: ["edge-timeout-seconds"])
        if let value = try discovery.integer("edge-timeout-seconds") { configuration.edgeTimeoutSeconds = value }
        let limits = try file.section("limits", keys: [
            "max-body-bytes", "max-publications-per-device", "max-subscriptions-per-device",
            "max-sightings-per-report", "max-changes-per-batch", "max-devices-per-project", "max-stream-buffer-bytes",
            "snapshot-page-bytes", "max-observations-per-request", "max-namespaced-types-per-request", "max-query-terms",
            "max-channel-queue", "max-upstream-per-device",
            "registrations-per-address-per-minute", "registrations-per-project-per-minute", "device-idle-days",
            "deleted-device-days",
        ])
        if let value = try limits.integer("max-channel-queue") { configuration.limits.maxChannelQueue = value }
        if let value = try limits.integer("max-upstream-per-device") { configuration.limits.maxUpstreamPerDevice = value }
        if let value = try limits.integer("max-body-bytes") { configuration.limits.maxBodyBytes = value }
        if let value = try limits.integer("max-publications-per-device") { configuration.limits.maxPublicationsPerDevice = value }
        if let value = try limits.integer("max-subscriptions-per-device") { configuration.limits.maxSubscriptionsPerDevice = value }
        if let value = try limits.integer("max-sightings-per-report") { configuration.limits.maxSightingsPerReport = value }
        if let value = try limits.integer("max-changes-per-batch") { configuration.limits.maxChangesPerBatch = value }
        if let value = try limits.integer("max-devices-per-project") { configuration.limits.maxDevicesPerProject = value }
        if let value = try limits.integer("max-stream-buffer-bytes") { configuration.limits.maxStreamBufferBytes = value }
        if let value = try limits.integer("snapshot-page-bytes") { configuration.limits.snapshotPageBytes = value }
        if let value = try limits.integer("max-observations-per-request") { configuration.limits.maxObservationsPerRequest = value }
        if let value = try limits.integer("max-query-terms") { configuration.limits.maxQueryTerms = value }
        if let value = try limits.integer("max-namespaced-types-per-request") {
            configuration.limits.maxNamespacedTypesPerRequest = value
        }
        if let value = try limits.integer("registrations-per-address-per-minute") {
            configuration.limits.registrationsPerAddressPerMinute = value
        }
        if let value = try limits.integer("registrations-per-project-per-minute") {
            configuration.limits.registrationsPerProjectPerMinute = value
        }
        if let value = try limits.integer("device-idle-days") { configuration.limits.deviceIdleDays = value }
        if let value = try limits.integer("deleted-device-days") { configuration.limits.deletedDeviceDays = value }
        let xmpp = try file.section("xmpp", keys: [
            "listen", "domain", "certificate", "private-key", "max-stanza-bytes", "max-connections", "max-connections-per-project", "max-unacked-per-connection",
            "max-pending-downstream-per-device", "max-pending-receipts-per-project", "claim-lease-seconds", "max-unauthenticated-connections", "max-unauthenticated-connections-per-address",
            "tls-handshake-timeout-seconds", "negotiation-timeout-seconds", "idle-timeout-seconds", "ping-timeout-seconds",
        ])
        if let listen = try xmpp.string("listen") {
            configuration.xmpp.listen = try ListenAddress(parsing: listen, what: "\(file.source): [xmpp] listen")
        }
        if let value = try xmpp.string("domain") { configuration.xmpp.domain = value }
        if let value = try xmpp.string("certificate") { configuration.xmpp.certificatePath = value }
        if let value = try xmpp.string("private-key") { configuration.xmpp.privateKeyPath = value }
        if let value = try xmpp.integer("max-stanza-bytes") { configuration.xmpp.maxStanzaBytes = value }
        if let value = try xmpp.integer("max-connections") { configuration.xmpp.maxConnections = value }
        if let value = try xmpp.integer("max-connections-per-project") { configuration.xmpp.maxConnectionsPerProject = value }
        if let value = try xmpp.integer("max-unacked-per-connection") { configuration.xmpp.maxUnackedPerConnection = value }
        if let value = try xmpp.integer("max-pending-downstream-per-device") {
            configuration.xmpp.maxPendingDownstreamPerDevice = value
        }
        if let value = try xmpp.integer("max-pending-receipts-per-project") {
            configuration.xmpp.maxPendingReceiptsPerProject = value
        }
        if let value = try xmpp.integer("claim-lease-seconds") { configuration.xmpp.claimLeaseSeconds = value }
        if let value = try xmpp.integer("max-unauthenticated-connections") { configuration.xmpp.maxUnauthenticatedConnections = value }
        if let value = try xmpp.integer("max-unauthenticated-connections-per-address") {
            configuration.xmpp.maxUnauthenticatedConnectionsPerAddress = value
        }
        if let value = try xmpp.integer("tls-handshake-timeout-seconds") { configuration.xmpp.tlsHandshakeTimeoutSeconds = value }
        if let value = try xmpp.integer("negotiation-timeout-seconds") { configuration.xmpp.negotiationTimeoutSeconds = value }
        if let value = try xmpp.integer("idle-timeout-seconds") { configuration.xmpp.idleTimeoutSeconds = value }
        if let value = try xmpp.integer("ping-timeout-seconds") { configuration.xmpp.pingTimeoutSeconds = value }
        let replication = try file.section("replication", keys: ["advertised-url", "lease-seconds"])
        if let value = try replication.string("advertised-url") { configuration.replication.advertisedURL = value }
        if let value = try replication.integer("lease-seconds") { configuration.replication.leaseSeconds = value }
        do {
            try configuration.validate()
        } catch {
            throw ConfigurationError("\(file.source): \(error.message)")
        }
        return configuration
    }

    /// Checks every value against its range and the values against each other.
    public func validate() throws(ConfigurationError) {
        if let databaseURL {
            do {
                _ = try PostgresLocation(url: databaseURL)
            } catch {
                throw ConfigurationError("[database] url: \(error.message)")
            }
            if databasePasswordFile != nil, URLComponents(string: databaseURL)?.password != nil {
                throw ConfigurationError("[database] url has a password and password-file names another: set one")
            }
        } else {
            if databasePasswordFile != nil {
                throw ConfigurationError("[database] password-file is for url (a PostgreSQL database): path needs none")
            }
            guard !databasePath.isEmpty else { throw ConfigurationError("[database] path must not be empty") }
        }
        try Self.check(http.maxConnections, in: 1...1_000_000, "[http] max-connections")
        try Self.check(http.maxConnectionsPerAddress, in: 1...http.maxConnections, "[http] max-connections-per-address")
        if let perProject = http.maxWebSocketsPerProject {
            try Self.check(perProject, in: 1...1_000_000, "[http] max-websockets-per-project")
        }
        try Self.check(http.headerTimeoutSeconds, in: 1...3600, "[http] header-timeout-seconds")
        try Self.check(http.idleTimeoutSeconds, in: 1...86_400, "[http] idle-timeout-seconds")
        try Self.check(http.requestTimeoutSeconds, in: 1...3600, "[http] request-timeout-seconds")
        // Room for the longest path the API has (a device id and an object id) and nearbyd's headers.
        try Self.check(http.maxRequestLineBytes, in: 1024...(1 << 20), "[http] max-request-line-bytes")
        try Self.check(http.maxHeaderBytes, in: max(4096, http.maxRequestLineBytes)...(1 << 20), "[http] max-header-bytes",
                       below: "at least 4096 and max-request-line-bytes: the head holds the request line")
        _ = try AddressPrefixes(http.proxyProtocolFrom, what: "[http] proxy-protocol-from")
        try Self.check(tokenLifetimeSeconds, in: 60...86_400, "[tokens] lifetime-seconds")
        guard tokenOverlapSeconds >= 0, tokenOverlapSeconds < tokenLifetimeSeconds else {
            throw ConfigurationError("[tokens] overlap-seconds is \(tokenOverlapSeconds); it must be at least 0 and less than lifetime-seconds (\(tokenLifetimeSeconds))")
        }
        try Self.check(edgeTimeoutSeconds, in: 1...3600, "[discovery] edge-timeout-seconds")
        // Below what nearbyd sends, a daemon would retry a refused request forever.
        try Self.check(limits.maxBodyBytes, in: Self.minimumBodyBytes...16_777_216, "[limits] max-body-bytes",
                       below: "room for the largest change batch nearbyd sends")
        try Self.check(limits.maxPublicationsPerDevice, in: 1...100_000, "[limits] max-publications-per-device")
        try Self.check(limits.maxSubscriptionsPerDevice, in: 1...100_000, "[limits] max-subscriptions-per-device")
        try Self.check(limits.maxSightingsPerReport, in: ClientBatchLimits.maxSightingsPerReport...100_000,
                       "[limits] max-sightings-per-report",
                       below: "nearbyd reports up to \(ClientBatchLimits.maxSightingsPerReport) sightings at once")
        try Self.check(limits.maxChangesPerBatch, in: ClientBatchLimits.maxChangesPerBatch...100_000, "[limits] max-changes-per-batch",
                       below: "nearbyd sends up to \(ClientBatchLimits.maxChangesPerBatch) changes at once")
        try Self.check(limits.maxDevicesPerProject, in: 1...1_000_000_000, "[limits] max-devices-per-project")
        try Self.check(limits.maxStreamBufferBytes, in: (1 << 20)...(1 << 30), "[limits] max-stream-buffer-bytes")
        // A page waits in the stream's buffer until written, and nearbyd reads
        // a page as one message: its JSON (content as base64) must stay well
        // within ClientBatchLimits.maxStreamMessageBytes.
        try Self.check(limits.snapshotPageBytes, in: (1 << 16)...min(limits.maxStreamBufferBytes, 1 << 24),
                       "[limits] snapshot-page-bytes")
        try Self.check(limits.maxObservationsPerRequest, in: 1...10_000, "[limits] max-observations-per-request")
        try Self.check(limits.maxNamespacedTypesPerRequest, in: 1...1000, "[limits] max-namespaced-types-per-request")
        // Each term is an expression of the listing's SQL: well under SQLite's depth and variable limits.
        try Self.check(limits.maxQueryTerms, in: 1...100, "[limits] max-query-terms")
        try Self.check(limits.maxUpstreamPerDevice, in: 1...10_000_000, "[limits] max-upstream-per-device")
        try Self.check(limits.registrationsPerAddressPerMinute, in: 1...60_000, "[limits] registrations-per-address-per-minute")
        try Self.check(limits.registrationsPerProjectPerMinute, in: 1...600_000, "[limits] registrations-per-project-per-minute")
        try Self.check(limits.deviceIdleDays, in: 1...3650, "[limits] device-idle-days")
        try Self.check(limits.deletedDeviceDays, in: 1...3650, "[limits] deleted-device-days")
        guard (http.certificatePath == nil) == (http.privateKeyPath == nil) else {
            throw ConfigurationError("[http] certificate and private-key go together: set both (the API is served over TLS) or neither")
        }
        guard (xmpp.certificatePath == nil) == (xmpp.privateKeyPath == nil) else {
            throw ConfigurationError("[xmpp] certificate and private-key go together: set both (the XMPP endpoint runs) or neither")
        }
        guard Self.isHostName(xmpp.domain) else {
            throw ConfigurationError("[xmpp] domain '\(xmpp.domain)' must be a host name (labels of letters, digits and '-')")
        }
        // Large enough for CCS's 4096-byte payload, JSON-escaped, in its stanza.
        try Self.check(xmpp.maxStanzaBytes, in: 32_768...(16 << 20), "[xmpp] max-stanza-bytes",
                       below: "room for a 4096-byte payload, escaped")
        try Self.check(xmpp.maxConnections, in: 1...100_000, "[xmpp] max-connections")
        try Self.check(xmpp.maxConnectionsPerProject, in: 1...100_000, "[xmpp] max-connections-per-project")
        try Self.check(xmpp.maxUnackedPerConnection, in: 1...10_000, "[xmpp] max-unacked-per-connection")
        try Self.check(xmpp.maxPendingDownstreamPerDevice, in: 1...100_000, "[xmpp] max-pending-downstream-per-device")
        try Self.check(xmpp.maxPendingReceiptsPerProject, in: 1...10_000_000, "[xmpp] max-pending-receipts-per-project")
        // Renewed every third of the lease, by a sweep that runs every second.
        try Self.check(xmpp.claimLeaseSeconds, in: 3...3600, "[xmpp] claim-lease-seconds")
        // A channel takes every message waiting for its device when it opens.
        try Self.check(limits.maxChannelQueue, in: xmpp.maxPendingDownstreamPerDevice...1_000_000, "[limits] max-channel-queue",
                       below: "every message waiting for a device, [xmpp] max-pending-downstream-per-device, goes on its channel at once")
        // The slowest is found by looking at them all (ConnectionAdmission): kept cheap.
        try Self.check(xmpp.maxUnauthenticatedConnections, in: 1...4096, "[xmpp] max-unauthenticated-connections")
        try Self.check(xmpp.maxUnauthenticatedConnectionsPerAddress, in: 1...xmpp.maxUnauthenticatedConnections,
                       "[xmpp] max-unauthenticated-connections-per-address")
        try Self.check(xmpp.tlsHandshakeTimeoutSeconds, in: 1...300, "[xmpp] tls-handshake-timeout-seconds")
        try Self.check(xmpp.negotiationTimeoutSeconds, in: 1...300, "[xmpp] negotiation-timeout-seconds")
        try Self.check(xmpp.idleTimeoutSeconds, in: 1...86_400, "[xmpp] idle-timeout-seconds")
        try Self.check(xmpp.pingTimeoutSeconds, in: 1...3600, "[xmpp] ping-timeout-seconds")
        // Renewed every third of the lease: below 3 s a round could not finish
        // within its third on a loaded database.
        try Self.check(replication.leaseSeconds, in: 3...600, "[replication] lease-seconds")
        if let url = replication.advertisedURL {
            guard let components = URLComponents(string: url), ["http", "https"].contains(components.scheme),
                  components.host?.isEmpty == false, components.path.isEmpty || components.path == "/",
                  components.query == nil, components.user == nil else {
                throw ConfigurationError("[replication] advertised-url '\(url)' must be an http:// or https:// URL of a host and port, without a path")
            }
        }
    }

    /// Where devices reach this replica: `[replication] advertised-url`, or
    /// the API's scheme, host and `port` (the one it listens on, when
    /// `[http] listen` asked for port 0), with this machine's host name
    /// for a wildcard `listen`.
    public func advertisedURL(port: Int, hostName: String = ProcessInfo.processInfo.hostName) -> String {
        if let url = replication.advertisedURL { return url.hasSuffix("/") ? String(url.dropLast()) : url }
        let host = ["0.0.0.0", "::", ""].contains(listen.host) ? hostName : listen.host
        return "\(http.usesTLS ? "https" : "http")://\(ListenAddress.format(host: host, port: port))"
    }

    private static func isHostName(_ text: String) -> Bool {
        (1...253).contains(text.utf8.count) && text.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            (1...63).contains(label.utf8.count) && label.first != "-" && label.last != "-"
                && label.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-") }
        }
    }

    /// `below` says why the lower bound is what it is, for a value under it.
    private static func check(_ value: Int, in range: ClosedRange<Int>, _ name: String,
                              below reason: String? = nil) throws(ConfigurationError) {
        guard range.contains(value) else {
            let why = value < range.lowerBound ? reason.map { " (\($0))" } ?? "" : ""
            throw ConfigurationError("\(name) is \(value); it must be between \(range.lowerBound) and \(range.upperBound)\(why)")
        }
    }
}

/// A `HOST:PORT` to listen on; IPv6 hosts in brackets (`[::1]:8080`). Port 0
/// asks the system for a free port.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `what` names the setting in the error message.
    public init(parsing text: String, what: String = "listen address") throws(ConfigurationError) {
        let hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw ConfigurationError("\(what) '\(text)' must be HOST:PORT, an IPv6 host in brackets ([::1]:8080)")
            }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                throw ConfigurationError("\(what) '\(text)' must be HOST:PORT, an IPv6 host in brackets ([::1]:8080)")
            }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        guard !hostPart.isEmpty else { throw ConfigurationError("\(what) '\(text)' has no host") }
        guard let port = Int(portPart), (0...65_535).contains(port) else {
            throw ConfigurationError("\(what) '\(text)' needs a port between 0 and 65535")
        }
        self.init(host: String(hostPart), port: port)
    }

    public var description: String { Self.format(host: host, port: port) }

    /// `host:port`, with brackets around an IPv6 host.
    public static func format(host: String, port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
