/// How a subscriber came to know of a message: the medium it was heard on and
/// the signal that told of the distance.
public struct SightingInfo: Hashable, Sendable, Codable {
    public var medium: Medium
    public var rssi: Int
    public var distanceMeters: Double
    /// The beacon, for a beacon message.
    public var beacon: BeaconDetails?

    public init(medium: Medium, rssi: Int, distanceMeters: Double, beacon: BeaconDetails? = nil) {
        self.medium = medium
        self.rssi = rssi
        self.distanceMeters = distanceMeters
        self.beacon = beacon
    }
}

/// The messages one subscription has found. A message (namespace, type,
/// content) can come from several sources (publications on several devices):
/// it is found when the first source comes near and lost when the last one goes.
public struct FoundTracker: Sendable {
    private var sources: [String: Message] = [:]
    private var sourceCounts: [Message: Int] = [:]
    private var firstInfo: [Message: SightingInfo] = [:]

    public init() {}

    /// Records a source; returns true if its message is newly found.
    public mutating func add(source: String, message: Message, info: SightingInfo) -> Bool {
        if let previous = sources[source] {
            guard previous != message else { return false }
            _ = remove(source: source)
        }
        sources[source] = message
        sourceCounts[message, default: 0] += 1
        guard sourceCounts[message] == 1 else { return false }
        firstInfo[message] = info
        return true
    }

    /// Forgets a source; returns its message if that was the last source of it.
    public mutating func remove(source: String) -> (Message, SightingInfo)? {
        guard let message = sources.removeValue(forKey: source) else { return nil }
        let remaining = (sourceCounts[message] ?? 1) - 1
        guard remaining == 0 else {
            sourceCounts[message] = remaining
            return nil
        }
        sourceCounts.removeValue(forKey: message)
        let info = firstInfo.removeValue(forKey: message)
        return info.map { (message, $0) }
    }

    /// Drops every source not in `current`; returns the messages thereby lost.
    public mutating func keepOnly(_ current: Set<String>) -> [(Message, SightingInfo)] {
        sources.keys.filter { !current.contains($0) }.compactMap { remove(source: $0) }
    }

    /// The sources currently known.
    public var sourceIDs: Set<String> { Set(sources.keys) }

    /// The message a source carries, while it is known.
    public func message(of source: String) -> Message? { sources[source] }

    /// The messages currently found.
    public var messages: Set<Message> { Set(sourceCounts.keys) }
}
