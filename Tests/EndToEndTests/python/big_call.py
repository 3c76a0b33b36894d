#!/usr/bin/python3
"""Oversized arguments to nearbyd from dbus-next, as a hostile local program
would send them. Prints one JSON line per call: the outcome ("ok", or the
error's name and message).

  big_call.py BUS SIZE

Makes these calls, each carrying SIZE bytes:
  create-junk     CreateManager with a byte array of SIZE in an unknown key
  create-strings  CreateManager with SIZE / 64 strings in an unknown key
  publish         Publish of SIZE bytes of content (on a manager of its own)
  subscribe-deep  Subscribe with a Strategy whose Mediums hold SIZE / 64 strings
  send-data       Upstream1.SendMessage whose data holds SIZE bytes
"""
import asyncio
import json
import sys

from dbus_next import DBusError, Variant
from dbus_next.aio import MessageBus


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


async def outcome(name, call):
    try:
        await call
        say(call=name, outcome="ok")
    except DBusError as error:
        say(call=name, outcome=error.type, message=error.text[:200])


async def main(address, size):
    size = int(size)
    bus = await MessageBus(bus_address=address).connect()
    root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
    nearby = root.get_interface("org.nearbyd.Nearby1")
    strings = ["m" * 60] * (size // 64)
    await outcome("create-junk", nearby.call_create_manager("key", {"Junk": Variant("ay", bytes(size))}))
    await outcome("create-strings", nearby.call_create_manager("key", {"Junk": Variant("as", strings)}))
    path = await nearby.call_create_manager("key", {})
    proxy = bus.get_proxy_object("org.nearbyd", path, await bus.introspect("org.nearbyd", path))
    manager = proxy.get_interface("org.nearbyd.Manager1")
    await outcome("publish", manager.call_publish(bytes(size), "chat", {}))
    await outcome("subscribe-deep", manager.call_subscribe({"Strategy": Variant("a{sv}", {"Mediums": Variant("as", strings)})}))
    upstream = proxy.get_interface("org.nearbyd.Upstream1")
    await outcome("send-data", upstream.call_send_message({"k": "v" * size}, "shop@nearby.test", "m", 60))
    say(call="done")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
