"""An application server that logs in to nearby-server's connection server
--rounds times in a row, each time on a new connection, as one written for
Firebase Cloud Messaging's CCS on slixmpp does (ccs_app.CCSApp): TLS from
the first byte, SASL PLAIN, bind, then one downstream message (dry_run, to
the registered device --device) whose ack it waits for before it
disconnects. It prints, flushed:

  round N ok SECONDS     logged in and acked, in that many seconds
  round N failed WHY     what went wrong: the connection failed or was
                         closed, a stream error, refused credentials, or no
                         ack within --timeout seconds

A round fails at the first such event: slixmpp's own reconnecting is not
let to hide it. Rounds start --interval seconds apart, so that they meet a
flood at different moments. Exits 0 when every round succeeded, 1 otherwise.
"""

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "TestSupport", "python"))
from ccs_app import CCSApp, say  # noqa: E402


class Round(CCSApp):
    """One login and one downstream message; `outcome` resolves to None on
    success or to the reason it failed."""

    def __init__(self, args, number):
        super().__init__(args.jid, args.key, args.ca)
        self.args = args
        self.message_id = f"round-{number}"
        self.outcome = asyncio.get_event_loop().create_future()
        self.add_event_handler("session_start", self.on_start)
        for event in ("connection_failed", "failed_auth", "disconnected"):
            self.add_event_handler(event, lambda _, event=event: self.settle(event.replace("_", "-")))
        self.add_event_handler("stream_error", lambda error: self.settle("stream-error " + error["condition"]))

    def settle(self, failure):
        if not self.outcome.done():
            self.outcome.set_result(failure)

    async def on_start(self, _):
        self.send_gcm(json.dumps({"to": self.args.device, "message_id": self.message_id,
                                  "data": {"round": self.message_id}, "dry_run": True}))

    def on_payload(self, text):
        payload = json.loads(text)
        if payload.get("message_id") != self.message_id:
            return
        if payload.get("message_type") == "ack":
            self.settle(None)
        else:
            self.settle("answered " + text)


async def rounds(args):
    failures = 0
    for number in range(1, args.rounds + 1):
        if number > 1:
            await asyncio.sleep(args.interval)
        started = time.monotonic()
        client = Round(args, number)
        client.connect_direct_tls(args.host, args.port)
        try:
            failure = await asyncio.wait_for(asyncio.shield(client.outcome), args.timeout)
        except asyncio.TimeoutError:
            failure = f"no ack within {args.timeout} s"
        if failure is None:
            say("round", number, "ok", f"{time.monotonic() - started:.3f}")
        else:
            failures += 1
            say("round", number, "failed", failure)
            # Stops slixmpp's reconnecting and ends the connection.
            client.cancel_connection_attempt()
            client.abort()
            continue
        # Settled: the close that follows is no failure.
        await asyncio.wait([asyncio.ensure_future(client.disconnect())], timeout=args.timeout)
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jid", required=True, help="PROJECT@DOMAIN")
    parser.add_argument("--key", required=True, help="the project's server key")
    parser.add_argument("--ca", required=True, help="the server's certificate, trusted as a CA")
    parser.add_argument("--device", required=True, help="a registered device of the project (the message's 'to')")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one round may take")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between the end of a round and the next")
    args = parser.parse_args()
    failures = asyncio.get_event_loop().run_until_complete(rounds(args))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
