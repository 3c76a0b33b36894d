import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Debian's haproxy (the Makefile's PACKAGES install it, `make setup`)
/// running the shipped dist/haproxy/nearby-server.cfg in front of real
/// replicas, as an operator runs it: one port for every replica in turn, one
/// port for each replica alone (its `[replication] advertised-url`), and a
/// PROXY protocol v2 header on every connection to a replica (`[http]
/// proxy-protocol-from`).
public enum HAProxy {
    public static let path = "/usr/sbin/haproxy"

    public static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: path) }

    /// `count` distinct ports free on 127.0.0.1 for haproxy to bind, chosen
    /// before the replicas start (each advertises its port). They are taken
    /// below Linux's ephemeral range (32768–60999 by default), from which
    /// the kernel hands out ports for port 0 and for outgoing connections:
    /// none of the many that the tests running beside this one open can
    /// take them before haproxy binds them.
    public static func freePorts(_ count: Int) throws -> [Int] {
        var ports: [Int] = []
        var held: [Int32] = []
        defer { for descriptor in held { close(descriptor) } }
        for _ in 0..<500 where ports.count < count {
            let candidate = Int.random(in: 20_000..<32_768)
            guard !ports.contains(candidate) else { continue }
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { continue }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(candidate).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            held.append(descriptor)
            if bound == 0 { ports.append(candidate) }
        }
        guard ports.count == count else {
            throw ChildProcessError(message: "no \(count) free ports on 127.0.0.1 between 20000 and 32767")
        }
        return ports
    }

    /// The shipped configuration with what this machine needs instead of
    /// the operator's values, each a text the file must hold (so that a
    /// change to the file fails here rather than leaving a placeholder in):
    /// haproxy runs as whoever runs the tests (the chroot and the user
    /// need root) and logs to its standard output; its ports (8080, 8081 to
    /// 8083) are `ports` on 127.0.0.1; the replicas (127.0.0.1:9001 to 9003)
    /// listen on `replicaPorts`.
    public static func configuration(ports: [Int], replicaPorts: [Int]) throws -> String {
        let path = RepositoryFile.path("dist/haproxy/nearby-server.cfg")
        var text = try String(contentsOfFile: path, encoding: .utf8)
        var replacements = [
            ("    log /dev/log local0\n", "    log stdout format raw local0\n"),
            ("    chroot /var/lib/haproxy\n", ""),
            ("    user haproxy\n", ""),
            ("    group haproxy\n", ""),
        ]
        for (index, port) in ports.enumerated() {
            replacements.append(("    bind :\(8080 + index)\n", "    bind 127.0.0.1:\(port)\n"))
        }
        for (index, port) in replicaPorts.enumerated() {
            replacements.append(("127.0.0.1:\(9001 + index)", "127.0.0.1:\(port)"))
        }
        for (shipped, local) in replacements {
            guard text.contains(shipped) else { throw ChildProcessError(message: "\(path) no longer has '\(shipped)'") }
            text = text.replacingOccurrences(of: shipped, with: local)
        }
        return text
    }

    /// Starts haproxy in the foreground (its child, `-db`) on the shipped
    /// configuration, written into `directory`, and returns once its health
    /// check of each replica has passed (`option log-health-checks` logs each
    /// replica's first). Each check begins with a PROXY v2 LOCAL header (no
    /// address), which a replica must take from a proxy-protocol-from address.
    public static func start(ports: [Int], replicaPorts: [Int], in directory: String) async throws -> ChildProcess {
        let file = directory + "/haproxy.cfg"
        try configuration(ports: ports, replicaPorts: replicaPorts).write(toFile: file, atomically: true, encoding: .utf8)
        let haproxy = try await ChildProcess(name: "haproxy", executable: path, arguments: ["-f", file, "-db"])
        do {
            for index in 1...replicaPorts.count {
                try await haproxy.waitForLine(containing: "Health check for server replicas/replica-\(index) succeeded", within: 30)
            }
        } catch {
            haproxy.signal(SIGKILL)
            throw error
        }
        return haproxy
    }
}
