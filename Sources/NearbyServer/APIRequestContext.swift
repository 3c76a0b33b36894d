import Hummingbird
import NIOCore

/// Hummingbird's basic request context with the connection the request came
/// on, whose client the registration rate limit counts by.
struct APIRequestContext: RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel
    var remoteAddress: SocketAddress? { channel.remoteAddress }

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
