import Foundation
import ServerAPI

/// How callers prove who they are: devices and project admins with a bearer
/// secret, devices registering and observing beacons with the project's API key.
enum CallerCredentials {
    /// The secret of `Authorization: Bearer SECRET`; `credential` says whose
    /// secret is expected, for the message when there is none.
    static func bearerSecret(_ authorization: String?, credential: String) throws(APIError) -> String {
        guard let authorization, !authorization.isEmpty else {
            throw APIError(.unauthenticated, "missing Authorization header; expected 'Bearer SECRET' with \(credential)")
        }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw APIError(.unauthenticated, "Authorization header must be 'Bearer SECRET'")
        }
        return parts[1].trimmingCharacters(in: .whitespaces)
    }

    /// The project whose API key this is.
    static func project(apiKey: String?, storage: any ServerStorage) async throws -> ProjectRecord {
        guard let apiKey, !apiKey.isEmpty else {
            throw APIError(.unauthenticated, "missing \(ServerAPI.apiKeyHeader) header with the project's API key")
        }
        guard let project = try await storage.project(apiKeyHash: Credentials.hash(apiKey)) else {
            throw APIError(.unauthenticated, "unknown API key")
        }
        return project
    }

    /// The project whose admin key `authorization` carries (`Bearer KEY`).
    static func project(adminAuthorization authorization: String?, storage: any ServerStorage) async throws -> ProjectRecord {
        let key = try bearerSecret(authorization, credential: "the project's admin key")
        guard let project = try await storage.project(adminKeyHash: Credentials.hash(key)) else {
            throw APIError(.unauthenticated, "unknown admin key")
        }
        return project
    }
}
