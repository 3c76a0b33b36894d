import AsyncHTTPClient
import Glibc
import NIOCore
import NIOPosix

/// Network failures said in words a user acts on: what failed, where, and the
/// likely cause, instead of NIO's and AsyncHTTPClient's descriptions
/// (`Connection errors: SingleConnectionFailure(target: …, error: connection
/// reset (error set): Connection refused) (errno: 111))`). TLS failures are
/// ``ServerTLS/explain(_:caFile:)``'s.
enum NetworkErrors {
    /// The failure in words, or nil for an error that is not one of the network's.
    static func explain(_ error: any Error) -> String? {
        switch error {
        case let error as NIOConnectionError:
            // Each address of the host was tried; the first one's failure speaks for them.
            if let failure = error.connectionErrors.first {
                return "cannot connect to \(error.host) port \(error.port): \(explain(failure.error) ?? "\(failure.error)")"
            }
            if error.dnsAError != nil || error.dnsAAAAError != nil {
                return "cannot resolve the host name '\(error.host)' (check [server] url and the resolver)"
            }
            return "cannot connect to \(error.host) port \(error.port)"
        case let error as IOError:
            return words(errno: error.errnoCode) ?? "\(error)"
        case let error as SocketAddressError.UnknownHost:
            return "cannot resolve the host name '\(error.host)' (check [server] url and the resolver)"
        case ChannelError.connectTimeout:
            return "no answer while connecting (timed out; a firewall may drop the packets)"
        case let error as HTTPClientError:
            switch error {
            case .connectTimeout: return "no answer while connecting (timed out; a firewall may drop the packets)"
            case .readTimeout, .deadlineExceeded: return "no answer within [server] request-timeout"
            case .remoteConnectionClosed: return "the server closed the connection before it answered"
            case .tlsHandshakeTimeout: return "the TLS handshake timed out"
            default: return nil
            }
        default:
            return nil
        }
    }

    private static func words(errno: Int32) -> String? {
        switch errno {
        case ECONNREFUSED: "connection refused (nothing listens there: is nearby-server running, and is [server] url right?)"
        case ECONNRESET: "the connection was reset by the server"
        case ETIMEDOUT: "timed out"
        case EHOSTUNREACH, ENETUNREACH: "no route to the host (the network is down, or the address is wrong)"
        case EADDRNOTAVAIL: "the address is not available on this host"
        default: nil
        }
    }
}
