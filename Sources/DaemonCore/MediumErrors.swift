import NearbyCore

/// A manager's error properties (`BluetoothPowerError`,
/// `BluetoothPermissionError`, `MicrophonePermissionError`): a medium the
/// daemon is configured for, which one of the manager's running objects
/// needs, cannot be used now.
public struct MediumErrors: Equatable, Sendable {
    /// BLE is off or absent (or bluetoothd is not running).
    public var bluetoothPower = false
    /// The system refuses the daemon BLE.
    public var bluetoothPermission = false
    /// The system refuses the daemon the microphone.
    public var microphonePermission = false

    public init(bluetoothPower: Bool = false, bluetoothPermission: Bool = false, microphonePermission: Bool = false) {
        self.bluetoothPower = bluetoothPower
        self.bluetoothPermission = bluetoothPermission
        self.microphonePermission = microphonePermission
    }

    /// `inUse`: the mediums the manager's running objects use; `enabled`:
    /// those the configuration enables; `conditions`: each medium's as its
    /// backend last said (none yet: BLE counts as unavailable).
    public static func of(inUse: Set<Medium>, enabled: Set<Medium>, conditions: [Medium: MediumCondition]) -> MediumErrors {
        let needsBLE = inUse.contains(.ble) && enabled.contains(.ble)
        let ble = conditions[.ble] ?? .unavailable
        return MediumErrors(
            bluetoothPower: needsBLE && ble == .unavailable,
            bluetoothPermission: needsBLE && ble == .refused,
            microphonePermission: inUse.contains(.audio) && enabled.contains(.audio) && conditions[.audio] == .refused)
    }
}
