/// What reading the static publication files again does to the
/// publications they made: a file whose publication is unchanged keeps it,
/// so subscribers elsewhere notice nothing; a file changed, gone or now
/// unreadable ends its publication; every other file is published (anew),
/// or says why it cannot be.
public struct StaticReload: Sendable {
    /// Files whose publication stays as it is.
    public var kept: Set<String> = []
    /// Files whose publication ends.
    public var ended: Set<String> = []

    /// `previous`: what each file published, by path; `loaded`: each file read
    /// now, in order, with what it says (nil: it cannot be published).
    public static func of<Source: Equatable>(previous: [String: Source],
                                             loaded: [(path: String, source: Source?)]) -> StaticReload {
        var reload = StaticReload()
        for (path, source) in loaded where source != nil && previous[path] == source {
            reload.kept.insert(path)
        }
        reload.ended = Set(previous.keys).subtracting(reload.kept)
        return reload
    }
}
