#if canImport(Glibc)
import Glibc
#endif

/// Distance from signal strength by the log-distance path-loss model,
/// RSSI = txPower − 10·n·log10(d): the daemon's estimate of how far a
/// sender is, and nearby-air's simulated radio (one model for both).
public enum PathLoss {
    /// `txPower` is the signal strength at one metre.
    public static func distance(rssi: Int, txPower: Int, exponent: Double = 2.0) -> Double {
        distance(rssi: Double(rssi), txPower: txPower, exponent: exponent)
    }

    /// The same for a smoothed (fractional) signal strength.
    public static func distance(rssi: Double, txPower: Int, exponent: Double = 2.0) -> Double {
        pow(10, (Double(txPower) - rssi) / (10 * exponent))
    }

    /// The signal strength at `distance` metres.
    public static func rssi(distance: Double, txPower: Int, exponent: Double = 2.0) -> Double {
        Double(txPower) - 10 * exponent * log10(max(distance, 0.01))
    }
}
