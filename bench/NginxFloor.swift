import Foundation
import TestSupport

/// Debian's nginx answering every request with a fixed 200 from one
/// process (no master, one worker's work, no access log): what an HTTP
/// request costs a server written for nothing else, measured from the same
/// generator as nearby-server's `GET /v1/health`.
struct NginxFloor: Sendable {
    static let path = "/usr/sbin/nginx"

    let process: ChildProcess
    let url: String
    private let directory: TemporaryDirectory

    /// Starts nginx on a free port of 127.0.0.1; returns once it answers.
    static func start() async throws -> NginxFloor {
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ChildProcessError(message: "the HTTP floor needs nginx (\(path)): `make bench-server` installs it")
        }
        let directory = try TemporaryDirectory("nearby-bench-nginx")
        let port = try freePort()
        let configuration = try directory.write("nginx.conf", """
            daemon off;
            master_process off;
            worker_processes 1;
            pid \(directory.file("nginx.pid"));
            error_log \(directory.file("error.log")) warn;
            events { worker_connections 4096; }
            http {
                access_log off;
                client_body_temp_path \(directory.path);
                proxy_temp_path \(directory.path);
                fastcgi_temp_path \(directory.path);
                uwsgi_temp_path \(directory.path);
                scgi_temp_path \(directory.path);
                keepalive_requests 1000000;
                server {
                    listen 127.0.0.1:\(port);
                    location / { default_type application/json; return 200 '{"status":"ok"}'; }
                }
            }

            """)
        let process = try await ChildProcess(name: "nginx", executable: path,
                                             arguments: ["-c", configuration, "-p", directory.path, "-e", directory.file("error.log")])
        let url = "http://127.0.0.1:\(port)"
        do {
            try await withTimeout(20, "nginx answering at \(url)") {
                while try await runProgram("/usr/bin/curl", ["-s", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}",
                                                             url + "/v1/health"]).output != "200" {
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        } catch {
            await process.stop()
            directory.remove()
            throw error
        }
        return NginxFloor(process: process, url: url, directory: directory)
    }

    func stop() async {
        await process.stop()
        directory.remove()
    }

    /// A port of 127.0.0.1 free now: the kernel's choice for port 0, let go
    /// for nginx to bind (which says so if another took it meanwhile).
    private static func freePort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ChildProcessError(message: "socket: errno \(errno)") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw ChildProcessError(message: "bind: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
