"""What the project's application servers on slixmpp share (the end-to-end
tests' and the benchmark's): logging in to nearby-server's XMPP connection
server as SENDER@DOMAIN, TLS from the first byte with the server's own
certificate as the CA, and <gcm xmlns="google:mobile:data"> payloads in and
out, as one writes a client of Firebase Cloud Messaging's CCS.
"""

import slixmpp
from slixmpp.xmlstream import ET
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher import MatchXPath

GCM = "google:mobile:data"


def say(*words):
    """One line for the test or benchmark to read, at once."""
    print(*words, flush=True)


class CCSApp(slixmpp.ClientXMPP):
    """A CCS client; a subclass gets each <gcm> payload's text in on_payload."""

    def __init__(self, jid, key, ca):
        super().__init__(jid, key)
        # The certificate is checked against the JID's domain.
        self.ca_certs = ca
        self.register_handler(Callback("gcm", MatchXPath("{jabber:client}message/{%s}gcm" % GCM), self._on_gcm))
        self.add_event_handler("failed_auth", lambda _: say("failed_auth"))

    def _on_gcm(self, message):
        self.on_payload(message.xml.find("{%s}gcm" % GCM).text or "")

    def on_payload(self, text):
        raise NotImplementedError

    def send_gcm(self, text):
        message = self.Message()
        message["id"] = ""
        gcm = ET.Element("{%s}gcm" % GCM)
        gcm.text = text
        message.append(gcm)
        message.send()

    def connect_direct_tls(self, host, port):
        self.connect((host, port), use_ssl=True, disable_starttls=True)
