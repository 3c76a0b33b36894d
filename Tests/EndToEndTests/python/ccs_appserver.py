"""An application server for nearby-server's XMPP connection server, written
as one would for Firebase Cloud Messaging's CCS, on slixmpp.

It logs in as SENDER@DOMAIN with the server key, prints one line per event
(flushed, for the test to wait on), and behaves as its flags say:

  ready                          logged in, session started
  gcm {json}                     a <gcm> payload arrived (upstream, ack, nack, receipt,
                                 control), re-serialized with sorted keys
  acked ID                       it acked upstream message or receipt ID
  disconnected                   the stream ended (it reconnects unless --once)

Flags: --no-ack (never ack upstream messages), --hold-first PREFIX (do not
ack upstream messages whose id starts with PREFIX on the first connection:
the connection server must give them again on the next), --send JSON (a
downstream payload to send once the first session starts; repeatable; sent
in order), --once (exit when disconnected instead of reconnecting). --port is
repeatable: each reconnection goes to the next port, as a CCS client moves
to another endpoint (replicas of nearby-server).
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
        self.sessions = 0
        self.attempts = 0
        self.add_event_handler("session_start", self.on_start)
        self.add_event_handler("disconnected", self.on_disconnected)

    async def on_start(self, _):
        self.sessions += 1
        say("ready")
        # Sent once: a reconnection does not send them again.
        for payload in self.args.send if self.sessions == 1 else []:
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
        held = self.args.hold_first is not None and self.sessions == 1 \
            and str(payload.get("message_id", "")).startswith(self.args.hold_first)
        if kind is None and not self.args.no_ack and not held or kind == "receipt":
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
            port = self.args.port[self.attempts % len(self.args.port)]
            self.attempts += 1
            self.connect_direct_tls(self.args.host, port)
        asyncio.ensure_future(attempt())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, action="append", required=True)
    parser.add_argument("--jid", required=True, help="SENDER@DOMAIN")
    parser.add_argument("--key", required=True, help="the project's server key")
    parser.add_argument("--ca", required=True, help="the server's certificate, trusted as a CA")
    parser.add_argument("--no-ack", action="store_true")
    parser.add_argument("--hold-first", metavar="PREFIX")
    parser.add_argument("--send", action="append", default=[])
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args()

    server = AppServer(args)
    server.connect_to_server()
    asyncio.get_event_loop().run_forever()


if __name__ == "__main__":
    sys.exit(main())
