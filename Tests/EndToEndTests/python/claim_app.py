#!/usr/bin/python3
"""An app that claims an AppId, from dbus-next. Waits for a line on stdin
(so that a test can place it in a control group first), then prints one
JSON line per step:

  claim_app.py BUS API_KEY APP_ID

  "claimed"    CreateManager with AppId APP_ID: the outcome
  "published"  CreateManager without an AppId, then Publish: the outcome
"""
import asyncio
import json
import sys

from dbus_next import DBusError, Variant
from dbus_next.aio import MessageBus


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


async def outcome(call):
    try:
        return "ok", await call
    except DBusError as error:
        return error.type, error.text


async def main(address, api_key, app_id):
    say(event="waiting")
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    bus = await MessageBus(bus_address=address).connect()
    root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
    nearby = root.get_interface("org.nearbyd.Nearby1")
    name, detail = await outcome(nearby.call_create_manager(api_key, {"AppId": Variant("s", app_id)}))
    say(event="claimed", outcome=name, message=detail if name != "ok" else "")
    path = await nearby.call_create_manager(api_key, {})
    proxy = bus.get_proxy_object("org.nearbyd", path, await bus.introspect("org.nearbyd", path))
    name, detail = await outcome(proxy.get_interface("org.nearbyd.Manager1").call_publish(b"hello", "chat", {}))
    say(event="published", outcome=name)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
