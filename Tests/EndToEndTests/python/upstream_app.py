#!/usr/bin/python3
"""An app using org.nearbyd.Upstream1 from dbus-next, as a Python program of
any user would. Prints one JSON line per event; takes commands on stdin.

  upstream_app.py BUS API_KEY APP_ID TO

Creates a manager of API_KEY with AppId APP_ID and sets DirectChannel; its
messages go to TO (SENDER_ID@DOMAIN). Prints
"ready" (the manager's path), then "connected" (DirectChannelConnected),
"succeeded" (SendSucceeded), "failed" (SendFailed) and "received"
(MessageReceived) as they come. Commands, one per line:

  send ID [TTL]   SendMessage with message id ID (TTL seconds, default 600);
                  prints "sent" or "error" (name, message) with the id.
"""
import asyncio
import json
import sys

from dbus_next import DBusError, Message, MessageType, Variant
from dbus_next.aio import MessageBus

UPSTREAM = "org.nearbyd.Upstream1"


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


def heard(message):
    if message.message_type != MessageType.SIGNAL:
        return
    if message.interface == UPSTREAM and message.member == "SendSucceeded":
        say(event="succeeded", id=message.body[0])
    elif message.interface == UPSTREAM and message.member == "SendFailed":
        say(event="failed", id=message.body[0], error=message.body[1])
    elif message.interface == UPSTREAM and message.member == "MessageReceived":
        say(event="received", data=message.body[0], sender=message.body[1], id=message.body[2])
    elif message.member == "PropertiesChanged" and message.body[0] == UPSTREAM:
        if "DirectChannelConnected" in message.body[1]:
            say(event="connected", value=message.body[1]["DirectChannelConnected"].value)


async def main(address, api_key, app_id, to):
    bus = await MessageBus(bus_address=address).connect()
    bus.add_message_handler(heard)
    # Listening before CreateManager: verdicts kept for the app follow its reply at once.
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus", member="AddMatch", signature="s",
                           body=["type='signal',sender='org.nearbyd'"]))
    root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
    path = await root.get_interface("org.nearbyd.Nearby1").call_create_manager(api_key, {"AppId": Variant("s", app_id)})
    proxy = bus.get_proxy_object("org.nearbyd", path, await bus.introspect("org.nearbyd", path))
    upstream = proxy.get_interface(UPSTREAM)
    await upstream.set_direct_channel(True)
    say(event="ready", manager=path)
    if await upstream.get_direct_channel_connected():
        say(event="connected", value=True)

    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode():
        words = line.split()
        if words[:1] == ["send"]:
            message_id, ttl = words[1], int(words[2]) if len(words) > 2 else 600
            try:
                await upstream.call_send_message({"app": app_id}, to, message_id, ttl)
                say(event="sent", id=message_id)
            except DBusError as error:
                say(event="error", id=message_id, name=error.type, message=error.text)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
