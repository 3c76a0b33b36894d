/// An upstream message that will not be delivered (`SendFailed`): the
/// FIRMessaging `didFailToSendDataMessageWithID` of this API.
public struct UpstreamFailure: Sendable, Equatable, Error {
    /// The id the app gave the message.
    public var messageID: String
    /// `SERVICE_NOT_AVAILABLE` (TTL 0 and no direct channel, or no application
    /// server connected), `TTL_EXCEEDED`, `INVALID_PARAMETERS` (addressed to
    /// another project).
    public var error: String
    public var description: String

    public init(messageID: String, error: String, description: String) {
        self.messageID = messageID
        self.error = error
        self.description = description
    }
}

/// A message from the app's application server (`MessageReceived`), over the
/// direct channel. Delivered at least once: after a reconnect the same
/// `messageID` may come again.
public struct DownstreamMessage: Sendable, Equatable {
    public var data: [String: String]
    /// The application server's sender id (its project).
    public var from: String
    /// The application server's id of the message.
    public var messageID: String

    public init(data: [String: String], from: String, messageID: String) {
        self.data = data
        self.from = from
        self.messageID = messageID
    }
}

/// What a manager hears of its upstream messages and its direct channel; each
/// runs on the bus thread, in order. Verdicts for messages sent before the app
/// (or nearbyd) restarted arrive right after the manager is created, so these
/// are given when the manager is made.
public struct UpstreamHandlers: Sendable {
    /// The application server acknowledged the message with this id.
    public var sendSucceeded: @Sendable (String) -> Void
    public var sendFailed: @Sendable (UpstreamFailure) -> Void
    public var messageReceived: @Sendable (DownstreamMessage) -> Void
    /// The direct channel of the manager's API key opened (true) or closed.
    public var directChannelConnectedChanged: @Sendable (Bool) -> Void

    public init(sendSucceeded: @escaping @Sendable (String) -> Void = { _ in },
                sendFailed: @escaping @Sendable (UpstreamFailure) -> Void = { _ in },
                messageReceived: @escaping @Sendable (DownstreamMessage) -> Void = { _ in },
                directChannelConnectedChanged: @escaping @Sendable (Bool) -> Void = { _ in }) {
        self.sendSucceeded = sendSucceeded
        self.sendFailed = sendFailed
        self.messageReceived = messageReceived
        self.directChannelConnectedChanged = directChannelConnectedChanged
    }
}
