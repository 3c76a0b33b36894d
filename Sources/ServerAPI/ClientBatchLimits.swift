/// The largest requests nearbyd sends to nearby-server, and the largest
/// stream message it reads.
///
/// nearbyd splits its changes and sighting reports to stay within these, and
/// nearby-server refuses a configuration whose `[limits]` are below them: a
/// server that answered a daemon's largest request with `413
/// payload_too_large` would have it send the same request again and again.
public enum ClientBatchLimits {
    /// Body bytes of one `POST /v1/devices/{device}/changes`, as nearbyd
    /// estimates them (content counted as base64). A single change larger than
    /// this, a publication of the largest content, goes in a batch of its own.
    public static let maxChangeBatchBytes = 192 * 1024
    /// Changes in one `POST /v1/devices/{device}/changes`.
    public static let maxChangesPerBatch = 128
    /// Entries, `seen` and `gone` together, in one `POST /v1/devices/{device}/sightings`.
    public static let maxSightingsPerReport = 256
    /// The largest stream message nearbyd reads: a found event or a page of
    /// a snapshot, which nearby-server keeps to `[limits]
    /// snapshot-page-bytes` (at most 16 MiB) of content and one match more.
    public static let maxStreamMessageBytes = 64 << 20
}
