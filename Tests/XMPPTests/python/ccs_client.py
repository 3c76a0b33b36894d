"""An XMPP client on slixmpp for XMPPTests: connects with TLS from the first
byte (like an application server to FCM's fcm-xmpp.googleapis.com:5235),
authenticates with SASL PLAIN, binds, sends each --send text as a
<gcm xmlns="google:mobile:data"> message and prints one line per event:

    session_start JID | gcm TEXT | pong | failed_auth | failed_all_auth
    stream_error CONDITION | disconnected | server_ping N (with --print-pings)

It disconnects after --expect gcm messages, and exits when disconnected.
"""

import argparse
import asyncio
import sys
from xml.sax.saxutils import escape

import slixmpp
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher import MatchXPath


def say(*words):
    print(*words, flush=True)


class Client(slixmpp.ClientXMPP):
    def __init__(self, args):
        super().__init__(args.jid, args.password)
        self.args = args
        self.received = 0
        self.ca_certs = args.ca
        self.register_plugin("xep_0199")
        self.register_handler(Callback(
            "gcm", MatchXPath("{jabber:client}message/{google:mobile:data}gcm"), self.on_gcm))
        self.add_event_handler("session_start", self.on_session_start)
        self.add_event_handler("failed_auth", lambda _: say("failed_auth"))
        self.add_event_handler("failed_all_auth", lambda _: say("failed_all_auth"))
        self.add_event_handler("stream_error", lambda error: say("stream_error", error["condition"]))
        self.add_event_handler("disconnected", lambda _: say("disconnected"))
        self.server_pings = 0
        if args.print_pings:
            # Beside xep_0199's own handler, which answers the ping.
            self.register_handler(Callback(
                "server ping", MatchXPath("{jabber:client}iq/{urn:xmpp:ping}ping"), self.on_server_ping))

    def on_server_ping(self, _):
        self.server_pings += 1
        say("server_ping", self.server_pings)

    async def on_session_start(self, _):
        say("session_start", self.boundjid.full)
        if self.args.ping:
            await self.plugin["xep_0199"].ping(timeout=20)
            say("pong")
        for text in self.args.send:
            self.send_raw(f"<message><gcm xmlns='google:mobile:data'>{escape(text)}</gcm></message>")
        if self.args.expect == 0 and not self.args.stay:
            self.disconnect()

    def on_gcm(self, message):
        say("gcm", message.xml.find("{google:mobile:data}gcm").text)
        self.received += 1
        if self.received == self.args.expect and not self.args.stay:
            self.disconnect()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jid", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--ca", required=True, help="PEM file of the server's (self-signed) certificate")
    parser.add_argument("--send", action="append", default=[])
    parser.add_argument("--expect", type=int, default=0, help="gcm messages to wait for before disconnecting")
    parser.add_argument("--ping", action="store_true", help="send an XEP-0199 ping first")
    parser.add_argument("--stay", action="store_true", help="stay connected until the server ends the stream")
    parser.add_argument("--print-pings", action="store_true", help="print each ping the server sends")
    args = parser.parse_args()

    client = Client(args)
    # use_ssl: TLS from the first byte; the certificate is checked against --ca
    # and the JID's domain.
    client.connect((args.host, args.port), use_ssl=True, disable_starttls=True)
    asyncio.get_event_loop().run_until_complete(client.disconnected)
    sys.exit(0)


if __name__ == "__main__":
    main()
