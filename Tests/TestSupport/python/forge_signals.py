#!/usr/bin/python3
"""Forged D-Bus signals, as any user on a bus can send them.

Connects to the bus at --bus (as whoever runs it: the tests run it as the
user nobody), and sends each signal given as JSON to every other
connection on the bus (or only to --to), addressed to that connection
alone: the bus delivers such a unicast signal whatever the recipient's
match rules. The sender is the forger's own unique name; a signal cannot
claim another.

Each signal is {"path", "interface", "member", "signature", "body"}: the
body a JSON list with one value per type of the signature, where "ay" is a
list of byte values or a text (its UTF-8 bytes), "a{..}" an object, "v" a
[signature, value] pair, a struct a list. The string "{forger}" stands for
the forger's own unique name.

When every signal is sent, asks the bus daemon for its id and waits for the
answer: the bus routes one connection's messages in order, so the signals
are then in their recipients' queues, ahead of anything sent after. Prints
"forged N signals to M connections" and exits 0.
"""

import argparse
import asyncio
import json
import sys

from dbus_next import Message, Variant
from dbus_next.aio import MessageBus
from dbus_next.constants import BusType, MessageType
from dbus_next.signature import SignatureTree


def value(type_, item):
    """The dbus-next value of `item` (from JSON) for the signature type `type_`."""
    token = type_.token
    if token == "a":
        element = type_.children[0]
        if element.token == "y":
            return item.encode() if isinstance(item, str) else bytes(item)
        if element.token == "{":
            key, val = element.children
            return {value(key, k): value(val, v) for k, v in item.items()}
        return [value(element, e) for e in item]
    if token == "(":
        return [value(t, e) for t, e in zip(type_.children, item)]
    if token == "v":
        signature, inner = item
        return Variant(signature, value(SignatureTree(signature).types[0], inner))
    return item


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bus", required=True)
    parser.add_argument("--to", help="one connection's name (default: every other connection)")
    parser.add_argument("signals", help="a JSON list of signals")
    args = parser.parse_args()
    bus = await MessageBus(bus_address=args.bus, bus_type=BusType.SYSTEM).connect()
    signals = json.loads(args.signals.replace('"{forger}"', json.dumps(bus.unique_name)))
    reply = await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                   interface="org.freedesktop.DBus", member="ListNames"))
    targets = [args.to] if args.to else [name for name in reply.body[0]
                                         if name.startswith(":") and name != bus.unique_name]
    for target in targets:
        for signal in signals:
            types = SignatureTree(signal["signature"]).types
            body = [value(t, item) for t, item in zip(types, signal["body"])]
            bus.send(Message(message_type=MessageType.SIGNAL, destination=target, path=signal["path"],
                             interface=signal["interface"], member=signal["member"],
                             signature=signal["signature"], body=body))
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus", member="GetId"))
    print(f"forged {len(signals)} signals to {len(targets)} connections", flush=True)
    bus.disconnect()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as error:  # a clear line for the test's report
        print(f"forge_signals: {error}", file=sys.stderr)
        sys.exit(1)
