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
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "TestSupport", "python"))
from ccs_app import CCSApp, say  # noqa: E402


class AppServer(CCSApp):
    def __init__(self, args):
        super().__init__(args.jid, args.key, args.ca)
        self.args = args
        self.add_event_handler("session_start", self.on_start)
        self.add_event_handler("disconnected", self.on_disconnected)

    async def on_start(self, _):
        say("ready")
        for payload in self.args.send:
            self.send_gcm(payload)

    def on_payload(self, text):
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
            self.connect_direct_tls(self.args.host, self.args.port)
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

    server = AppServer(args)
    server.connect_to_server()
    asyncio.get_event_loop().run_forever()


if __name__ == "__main__":
    sys.exit(main())
