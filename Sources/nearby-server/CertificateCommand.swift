import ArgumentParser
import Foundation
import XMPP

struct CertificateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "certificate",
        abstract: "Write a self-signed TLS certificate and key for the HTTP API or the XMPP endpoint (tests, development).",
        discussion: """
            Makes a new P-256 key and a self-signed certificate for DOMAIN (its common name and \
            subject alternative name, with 127.0.0.1, ::1 and localhost besides), valid for --days \
            and its own CA (it may sign certificates, so that BoringSSL clients such as nearbyd take \
            it as a trust anchor), and writes both as PEM: the key readable by its owner only. Point [http] or [xmpp] \
            certificate and private-key at them; clients trust the certificate file itself as \
            their CA (nearbyd: [server] ca-file). A \
            production server should use a certificate from a real CA instead.

            Existing files are not overwritten (exit status 1).
            """
    )

    @Argument(help: "The XMPP domain the certificate names ([xmpp] domain).")
    var domain: String

    @Option(name: .long, help: ArgumentHelp("Where to write the certificate (PEM).", valueName: "path"))
    var certificate: String

    @Option(name: .long, help: ArgumentHelp("Where to write the private key (PEM, mode 0600).", valueName: "path"))
    var privateKey: String

    @Option(name: .long, help: "How many days the certificate is valid (1 to 3650).")
    var days = 365

    func validate() throws {
        guard (1...3650).contains(days) else { throw ValidationError("--days must be between 1 and 3650") }
    }

    func run() throws {
        let made = try SelfSignedCertificate.generate(commonName: domain,
                                                      subjectAlternativeNames: [domain, "localhost", "127.0.0.1", "::1"],
                                                      validity: .seconds(days * 86_400))
        try Self.create(privateKey, made.privateKeyPEM, mode: 0o600)
        try Self.create(certificate, made.certificatePEM, mode: 0o644)
        print("certificate: \(certificate)\nprivate-key: \(privateKey)")
    }

    /// Writes a new file with `mode` from its creation; an existing file is an error.
    private static func create(_ path: String, _ text: String, mode: mode_t) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw CertificateFileError(path: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        let data = Array(text.utf8)
        guard write(fd, data, data.count) == data.count else {
            throw CertificateFileError(path: path, reason: String(cString: strerror(errno)))
        }
    }
}

struct CertificateFileError: Error, CustomStringConvertible {
    let path: String
    let reason: String
    var description: String { "cannot write \(path): \(reason)" }
}
