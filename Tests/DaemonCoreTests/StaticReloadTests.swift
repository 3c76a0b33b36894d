import DaemonCore
import Testing

/// SIGHUP by hand: which static publications a reload of their files keeps
/// and which it ends.
struct StaticReloadTests {
    @Test func anUnchangedFileKeepsItsPublicationAndTheOthersEnd() {
        let previous = ["a.toml": "hello", "b.toml": "old", "c.toml": "gone", "d.toml": "turned bad"]
        let reload = StaticReload.of(previous: previous, loaded: [
            ("a.toml", "hello"), ("b.toml", "new"), ("d.toml", nil), ("e.toml", "fresh"), ("f.toml", nil),
        ])
        #expect(reload.kept == ["a.toml"])
        #expect(reload.ended == ["b.toml", "c.toml", "d.toml"])
    }

    @Test func theFirstLoadKeepsAndEndsNothing() {
        let reload = StaticReload.of(previous: [String: String](), loaded: [("a.toml", "hello"), ("b.toml", nil)])
        #expect(reload.kept.isEmpty)
        #expect(reload.ended.isEmpty)
    }
}
