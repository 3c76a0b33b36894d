import NearbyBusContract
/// What went wrong with a request, named as the D-Bus API names its errors
/// (`org.nearbyd.Error.<name>`).
public enum NearbyError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An argument is malformed, out of bounds, of the wrong type, or contradicts another.
    case invalidArguments(String)
    /// The user has not allowed Nearby for this app.
    case notPermitted(String)
    /// A configured limit would be exceeded.
    case limitExceeded(String)
    /// The request needs something this daemon has disabled.
    case notSupported(String)
    /// The object belongs to another client.
    case accessDenied(String)
    /// The object no longer exists (released, expired, or its owner left).
    case doesNotExist(String)
    /// The daemon could not carry the request out (its state directory refused a write).
    case failed(String)

    /// The D-Bus error it is answered with.
    public var busError: NearbyBusContract.Error {
        switch self {
        case .invalidArguments: .invalidArguments
        case .notPermitted: .notPermitted
        case .limitExceeded: .limitExceeded
        case .notSupported: .notSupported
        case .accessDenied: .accessDenied
        case .doesNotExist: .doesNotExist
        case .failed: .failed
        }
    }

    public var message: String {
        switch self {
        case .invalidArguments(let m), .notPermitted(let m), .limitExceeded(let m), .notSupported(let m),
             .accessDenied(let m), .doesNotExist(let m), .failed(let m):
            m
        }
    }

    public var description: String { "\(busError.rawValue): \(message)" }
}
