"""An application server for nearby-server's XMPP connection server, written
as one would for Firebase Cloud Messaging's CCS, on slixmpp.

It logs in as SENDER@DOMAIN with the server key, prints one line per event
(flushed, for the test to wait on), and behaves as its flags say:

  ready                          logged in, session started
  gcm {json}                     a <gcm> payload arrived (upstream, ack, nack, receipt,
                                 control), re-serialized with sorted keys
  acked ID                       it acked upstream message or receipt ID
  disconnected                   the stream ended (it reconnects unless --once)

Flags: --no-ack (never ack upstream messages), --send JSON (a downstream
payload to send once the session starts; repeatable; sent in order),
--once (exit when disconnected instead of reconnecting).
"""

import argparse
import asyncio
import json
import sys

import slixmpp
from slixmpp.xmlstream import ET
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher import MatchXPath

GCM = "google:mobile:data"


def say(*words):
    print(*words, flush=True)


class AppServer(slixmpp.ClientXMPP):
    def __init__(self, jid, key, args):
        super().__init__(jid, key)
        self.args = args
        self.register_handler(Callback("gcm", MatchXPath("{jabber:client}message/{%s}gcm" % GCM), self.on_gcm))
        self.add_event_handler("session_start", self.on_start)
        self.add_event_handler("disconnected", self.on_disconnected)
        self.add_event_handler("failed_auth", lambda _: say("failed_auth"))

    def send_gcm(self, payload):
        message = self.Message()
        message["id"] = ""
        gcm = ET.Element("{%s}gcm" % GCM)
        gcm.text = payload
        message.append(gcm)
        message.send()

    async def on_start(self, _):
        say("ready")
        for payload in self.args.send:
            self.send_gcm(payload)

    def on_gcm(self, message):
        text = message.xml.find("{%s}gcm" % GCM).text or ""
        try:
            payload = json.loads(text)
        except ValueError:
            say("gcm", text)
            return
        # One spelling for the test to match: sorted keys, ": " and ", ".
        say("gcm", json.dumps(payload, sort_keys=True))
        kind = payload.get("message_type")
        if kind is None and not self.args.no_ack or kind == "receipt":
            self.send_gcm(json.dumps({"to": payload["from"], "message_id": payload["message_id"], "message_type": "ack"}))
            say("acked", payload["message_id"])

    def on_disconnected(self, _):
        say("disconnected")
        if self.args.once:
            asyncio.get_event_loop().stop()
        else:
            self.connect_to_server(delay=0.2)

    def connect_to_server(self, delay=0.0):
        async def attempt():
            await asyncio.sleep(delay)
            self.connect((self.args.host, self.args.port), use_ssl=True, disable_starttls=True)
        asyncio.ensure_future(attempt())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jid", required=True, help="SENDER@DOMAIN")
    parser.add_argument("--key", required=True, help="the project's server key")
    parser.add_argument("--ca", required=True, help="the server's certificate, trusted as a CA")
    parser.add_argument("--no-ack", action="store_true")
    parser.add_argument("--send", action="append", default=[])
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args()

    server = AppServer(args.jid, args.key, args)
    # The server's certificate is checked against the JID's domain, with the
    # certificate itself as the CA.
    server.ca_certs = args.ca
    server.connect_to_server()
    asyncio.get_event_loop().run_forever()


if __name__ == "__main__":
    sys.exit(main())
