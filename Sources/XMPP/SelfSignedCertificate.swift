import Crypto
import Foundation
import SwiftASN1
import X509

/// A self-signed TLS server certificate, for tests and development servers: a
/// client trusts it by taking the certificate itself as its CA file.
public enum SelfSignedCertificate {
    /// A new P-256 key and a certificate for it, valid from an hour ago for
    /// `validity`, naming `commonName` and, as subject alternative names, each of
    /// `subjectAlternativeNames` (an IPv4 or IPv6 address as an IP address, anything
    /// else as a DNS name). Both in PEM.
    public static func generate(
        commonName: String, subjectAlternativeNames: [String], validity: Duration = .seconds(365 * 86400)
    ) throws -> (certificatePEM: String, privateKeyPEM: String) {
        let key = P256.Signing.PrivateKey()
        let publicKey = Certificate.PublicKey(key.publicKey)
        let name = try DistinguishedName { CommonName(commonName) }
        let subjectKeyIdentifier = SubjectKeyIdentifier(hash: publicKey)
        let now = Date()
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(TimeInterval(validity.components.seconds)),
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                // Its own CA too: clients trust the file itself as their CA,
                // and BoringSSL (NIOSSL, so nearbyd) takes as an anchor only
                // a certificate that may sign certificates.
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(subjectAlternativeNames.map(generalName))
                subjectKeyIdentifier
                AuthorityKeyIdentifier(keyIdentifier: subjectKeyIdentifier.keyIdentifier)
            },
            issuerPrivateKey: Certificate.PrivateKey(key))
        return (try certificate.serializeAsPEM().pemString, key.pemRepresentation)
    }

    private static func generalName(_ name: String) -> GeneralName {
        var v4 = in_addr()
        if inet_pton(AF_INET, name, &v4) == 1 {
            return .ipAddress(ASN1OctetString(contentBytes: withUnsafeBytes(of: &v4) { ArraySlice($0) }))
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, name, &v6) == 1 {
            return .ipAddress(ASN1OctetString(contentBytes: withUnsafeBytes(of: &v6) { ArraySlice($0) }))
        }
        return .dnsName(name)
    }
}
