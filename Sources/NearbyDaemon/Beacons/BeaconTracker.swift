#if canImport(Glibc)
import Glibc
#endif
import Beacons
import Mediums
import NearbyCore

/// The beacons in range, from the frames heard: each beacon's smoothed signal
/// and distance, its latest telemetry, and when it was last heard. Pure state;
/// the watch drives it with the clock.
///
/// A beacon is its advertised id (Eddystone-UID, Eddystone-EID, iBeacon).
/// URL frames identify nothing and are not tracked; a TLM frame counts as a
/// hearing of the beacon that last sent an id from the same sender.
struct BeaconTracker {
    struct Beacon: Equatable {
        let id: AdvertisedID
        let kind: BeaconKind
        /// The power the beacon declares at one metre, dBm.
        var powerAtOneMetre: Int
        /// Exponentially smoothed RSSI, dBm, and its smoothed variance.
        var rssi: Double
        var rssiVariance: Double
        var lastHeard: ContinuousClock.Instant
        /// The last plain TLM frame of its sender, as service data.
        var telemetry: [UInt8]?

        var distance: Double { PathLoss.distance(rssi: rssi, txPower: powerAtOneMetre) }

        /// One standard deviation of the distance estimate, metres: the RSSI's
        /// spread (at least 2 dB, what multipath costs a still beacon) mapped
        /// through the path-loss law.
        var accuracy: Double {
            let spread = max(rssiVariance.squareRoot(), 2)
            return distance * (pow(10, spread / 20) - 1)
        }

        var info: BeaconDetails {
            BeaconDetails(kind: kind.name, id: id.hex, txPower: powerAtOneMetre)
        }
    }

    /// How long a beacon may go unheard before it is gone.
    let lostTimeout: Duration
    /// The weight of a new reading in the smoothed RSSI (0 < weight ≤ 1).
    let smoothing: Double
    private(set) var beacons: [AdvertisedID: Beacon] = [:]
    private var lastIDOfSender: [String: AdvertisedID] = [:]

    init(lostTimeout: Duration, smoothing: Double = 0.3) {
        self.lostTimeout = lostTimeout
        self.smoothing = smoothing
    }

    /// Takes a hearing in; returns the beacon's id when it is newly in range.
    mutating func heard(_ sighting: BeaconSighting, at now: ContinuousClock.Instant) -> AdvertisedID? {
        if case .eddystoneTLM(let tlm) = sighting.frame {
            guard let id = lastIDOfSender[sighting.sender], beacons[id] != nil else { return nil }
            beacons[id]?.telemetry = tlm.serviceData
            beacons[id]?.lastHeard = now
            return nil
        }
        guard let id = sighting.frame.advertisedID, let power = sighting.frame.powerAtOneMetre else { return nil }
        lastIDOfSender[sighting.sender] = id
        let reading = Double(sighting.rssi)
        guard var beacon = beacons[id] else {
            beacons[id] = Beacon(id: id, kind: sighting.frame.kind, powerAtOneMetre: power, rssi: reading,
                                 rssiVariance: 0, lastHeard: now)
            return id
        }
        let deviation = reading - beacon.rssi
        beacon.rssi += smoothing * deviation
        beacon.rssiVariance = (1 - smoothing) * (beacon.rssiVariance + smoothing * deviation * deviation)
        beacon.powerAtOneMetre = power
        beacon.lastHeard = now
        beacons[id] = beacon
        return nil
    }

    /// Removes and returns the beacons not heard for the lost timeout.
    mutating func expire(at now: ContinuousClock.Instant) -> [Beacon] {
        let gone = beacons.values.filter { now - $0.lastHeard >= lostTimeout }
        for beacon in gone { beacons.removeValue(forKey: beacon.id) }
        if !gone.isEmpty { lastIDOfSender = lastIDOfSender.filter { beacons[$0.value] != nil } }
        return gone
    }
}
