import HTTPTypes
import Hummingbird
import ServerAPI

/// Sends a request for a device that another replica serves to that replica:
/// `307 Temporary Redirect` to the same path and query at its advertised URL,
/// an ``APIError`` `moved` in the body. 307 rather than 301 or 308: the owner
/// changes when replicas come and go, so the answer must not be cached, and
/// the method and body go along. Redirected rather than forwarded, so that a
/// device's requests and its stream cost one replica, not two (Redis
/// Cluster's MOVED does the same); nearbyd follows and stays. A WebSocket
/// upgrade never gets here: one for such a device is refused
/// (``DeviceSockets``), and nearbyd asks a REST call why, which is redirected.
struct DeviceHomeMiddleware<Context: RequestContext>: RouterMiddleware {
    let directory: PartitionDirectory

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let device = APIPath.device(inPath: request.uri.path), let home = directory.elsewhere(device: device) else {
            return try await next(request, context)
        }
        var location = home.url + request.uri.path
        if let query = request.uri.query { location += "?" + query }
        var response = APIErrorMiddleware<Context>.response(
            APIError(.moved, "device '\(device)' is served by the replica at \(home.url): send its requests there"))
        response.headers[.location] = location
        return response
    }
}
