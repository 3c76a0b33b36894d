import Logging
import SummarisedLog
import Synchronization
import Testing

/// Events anyone can cause (refused connections and logins) are logged a line
/// per kind and minute at most, with how many were not: time moved by hand.
@Suite struct SummarisedLogTests {
    /// The lines a logger was given: level, message and metadata.
    final class Lines: Sendable {
        struct Line: Equatable {
            let level: Logger.Level
            let message: String
            let notLogged: String?
        }

        private let lines = Mutex<[Line]>([])
        var all: [Line] { lines.withLock { $0 } }

        var logger: Logger {
            Logger(label: "test") { _ in Handler(lines: self) }
        }

        struct Handler: LogHandler {
            let lines: Lines
            var logLevel: Logger.Level = .trace
            var metadata: Logger.Metadata = [:]
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }

            func log(event: LogEvent) {
                lines.lines.withLock {
                    $0.append(Line(level: event.level, message: "\(event.message)",
                                   notLogged: event.metadata?["notLoggedSinceTheLastLine"].map { "\($0)" }))
                }
            }
        }
    }

    @Test func aKindIsLoggedOnceAMinuteWithTheCountOfTheRest() {
        let lines = Lines()
        let now = Mutex(Duration.zero)
        let log = SummarisedLog(logger: lines.logger, now: { now.withLock { $0 } })
        func at(_ seconds: Int64) { now.withLock { $0 = .seconds(seconds) } }

        log.note("address", "connection refused")
        for _ in 0..<1000 { log.note("address", "connection refused") }
        // Another kind has its own minute.
        log.note("total", "connection refused at the total")
        #expect(lines.all == [Lines.Line(level: .notice, message: "connection refused", notLogged: nil),
                              Lines.Line(level: .notice, message: "connection refused at the total", notLogged: nil)])
        at(59)
        log.note("address", "connection refused")
        #expect(lines.all.count == 2)
        // A minute after its last line: one more, with the 1,001 not logged.
        at(60)
        log.note("address", "connection refused")
        #expect(lines.all.last == Lines.Line(level: .notice, message: "connection refused", notLogged: "1001"))
        // After a quiet spell, the next is logged at once, with nothing left over.
        at(600)
        log.note("address", "connection refused")
        #expect(lines.all.last == Lines.Line(level: .notice, message: "connection refused", notLogged: nil))
        #expect(lines.all.count == 4)
    }
}
