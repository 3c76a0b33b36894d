import Hummingbird
import NIOCore

/// Hummingbird's basic request context with the client's address, which the
/// registration rate limit counts by.
struct APIRequestContext: RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
