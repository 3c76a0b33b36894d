#!/usr/bin/env python3
"""An application server for nearby-server's connection server, on slixmpp.

It logs in as PROJECT@DOMAIN with the project's server key, over TLS from
the first byte (as to Firebase Cloud Messaging's CCS, whose wire shape the
connection server has), and for each upstream message a device sends:

- prints it: `upstream FROM ID {data}`;
- acks it, so that the device hears it was delivered (`SendSucceeded`);
- answers the device with a downstream message whose data is
  {"reply": "got ID"}, and prints `downstream TO ID` once the server has
  taken it (its ack).

  appserver.py --host 127.0.0.1 --port 5235 --project hello --domain nearby.test \\
      --key SERVER_KEY --ca xmpp.pem

--ca is the certificate the connection server presents, or the CA that
signed it (`nearby-server certificate` writes a self-signed one). The server
key is printed by `nearby-server project create` (and replaced by
`nearby-server project server-key`). See doc/nearby-server.md, "Connection
server", for every payload. It prints `ready` once logged in, and stops on
Ctrl-C; it stops too, with `draining`, when the server says it is going
away (CONNECTION_DRAINING): a real one would connect again, to another
replica.
"""

import argparse
import asyncio
import itertools
import json

import slixmpp
from slixmpp.xmlstream import ET
from slixmpp.xmlstream.handler import Callback
from slixmpp.xmlstream.matcher import MatchXPath

GCM = "google:mobile:data"


class AppServer(slixmpp.ClientXMPP):
    def __init__(self, args):
        super().__init__("%s@%s" % (args.project, args.domain), args.key)
        self.ca_certs = args.ca
        self.replies = itertools.count(1)
        self.register_handler(Callback("gcm", MatchXPath("{jabber:client}message/{%s}gcm" % GCM), self.on_gcm))
        self.add_event_handler("session_start", lambda _: say("ready"))
        self.add_event_handler("disconnected", lambda _: asyncio.get_event_loop().stop())
        self.add_event_handler("failed_auth", lambda _: (say("the server refused the project or its key"), self.disconnect()))

    def on_gcm(self, message):
        payload = json.loads(message.xml.find("{%s}gcm" % GCM).text or "{}")
        kind = payload.get("message_type")
        if kind is None:
            # An upstream message from a device: ack it, then answer the device.
            device, message_id = payload["from"], payload["message_id"]
            say("upstream", device, message_id, json.dumps(payload.get("data", {}), sort_keys=True))
            self.send_payload({"to": device, "message_id": message_id, "message_type": "ack"})
            self.send_payload({"to": device, "message_id": "reply-%d" % next(self.replies),
                               "data": {"reply": "got " + message_id}})
        elif kind == "ack":
            say("downstream", payload.get("from"), payload.get("message_id"))
        elif kind == "nack":
            say("refused", payload.get("message_id"), payload.get("error"), payload.get("error_description"))
        elif kind == "control" and payload.get("control_type") == "CONNECTION_DRAINING":
            say("draining")
            self.disconnect()

    def send_payload(self, payload):
        message = self.Message()
        message["id"] = ""
        gcm = ET.Element("{%s}gcm" % GCM)
        gcm.text = json.dumps(payload)
        message.append(gcm)
        message.send()


def say(*words):
    print(*words, flush=True)


def main():
    parser = argparse.ArgumentParser(description="An application server for nearby-server's connection server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5235)
    parser.add_argument("--project", required=True, help="the project's name: the sender id")
    parser.add_argument("--domain", required=True, help="[xmpp] domain of the server")
    parser.add_argument("--key", required=True, help="the project's server key")
    parser.add_argument("--ca", required=True, help="the CA certificate (PEM) of the server's certificate")
    args = parser.parse_args()
    app = AppServer(args)
    app.connect((args.host, args.port), use_ssl=True, disable_starttls=True)
    try:
        asyncio.get_event_loop().run_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
