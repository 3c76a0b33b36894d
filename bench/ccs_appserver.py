"""The application server of `nearby-bench upstream`: a CCS client on
slixmpp, as one would write for Firebase Cloud Messaging, that logs in to
nearby-server's connection server as SENDER@DOMAIN with the server key.

It has two modes.

serve (the default) acks every upstream message and prints nothing per
message, so that it costs what acking costs and no more:

  ready          logged in, session started
  device ID      the first upstream message from registration id ID

--dry-run-to ID measures the XMPP floor of the benchmark instead: downstream
messages to ID with "dry_run": true, which the connection server checks and
acks without storing or sending them, so a round trip crosses TLS, XMPP and
the CCS layer and nothing else. It sends --warm-up of them, then --count one
at a time (the next after the previous ack), then --count with --window in
flight, prints

  rtt MS MS ...  the one-at-a-time round trips, send to ack, in milliseconds
  rate N         messages acked per second with --window in flight

and exits.
"""

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "TestSupport", "python"))
from ccs_app import CCSApp, say  # noqa: E402


class AppServer(CCSApp):
    def __init__(self, args):
        super().__init__(args.jid, args.key, args.ca)
        self.args = args
        self.devices = set()
        # Dry-run message id -> the future its ack or nack settles.
        self.waiting = {}
        self.add_event_handler("session_start", self.on_start)
        self.add_event_handler("disconnected", lambda _: asyncio.get_event_loop().stop())

    def send_json(self, payload):
        self.send_gcm(json.dumps(payload))

    async def on_start(self, _):
        say("ready")
        if self.args.dry_run_to:
            try:
                await self.measure_floor()
            finally:
                self.disconnect()

    def on_payload(self, text):
        payload = json.loads(text)
        kind = payload.get("message_type")
        if kind is None:
            if payload["from"] not in self.devices:
                self.devices.add(payload["from"])
                say("device", payload["from"])
            self.send_json({"to": payload["from"], "message_id": payload["message_id"], "message_type": "ack"})
        elif kind in ("ack", "nack"):
            waiter = self.waiting.pop(payload.get("message_id"), None)
            if waiter is None:
                return
            if kind == "ack":
                waiter.set_result(None)
            else:
                waiter.set_exception(RuntimeError("nack: %s" % json.dumps(payload)))

    async def dry_run(self, message_id):
        waiter = asyncio.get_event_loop().create_future()
        self.waiting[message_id] = waiter
        self.send_json({"to": self.args.dry_run_to, "message_id": message_id, "data": {"n": message_id},
                       "dry_run": True})
        await waiter

    async def measure_floor(self):
        for index in range(self.args.warm_up):
            await self.dry_run("warm-%d" % index)
        rtts = []
        for index in range(self.args.count):
            start = time.perf_counter()
            await self.dry_run("one-%d" % index)
            rtts.append((time.perf_counter() - start) * 1000)
        say("rtt", *("%.3f" % rtt for rtt in rtts))

        window = asyncio.Semaphore(self.args.window)

        async def one(index):
            async with window:
                await self.dry_run("many-%d" % index)

        start = time.perf_counter()
        await asyncio.gather(*(one(index) for index in range(self.args.count)))
        say("rate", "%.1f" % (self.args.count / (time.perf_counter() - start)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jid", required=True, help="SENDER@DOMAIN")
    parser.add_argument("--key", required=True, help="the project's server key")
    parser.add_argument("--ca", required=True, help="the server's certificate, trusted as a CA")
    parser.add_argument("--dry-run-to", help="measure the floor with dry runs to this registration id")
    parser.add_argument("--warm-up", type=int, default=50)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args()

    server = AppServer(args)
    server.connect_direct_tls(args.host, args.port)
    asyncio.get_event_loop().run_forever()


if __name__ == "__main__":
    sys.exit(main())
