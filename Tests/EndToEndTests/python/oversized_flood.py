#!/usr/bin/python3
"""One connection sends oversized calls to nearbyd one after another while
another makes calls of usual size, as a hostile local program and an app
beside it would. Prints one JSON line per call: which connection, the
outcome ("ok", or the error's name and message) and the seconds it took.

  oversized_flood.py BUS SIZE CALLS

The flood: CALLS CreateManager calls, each with a byte array of SIZE in an
unknown key. Meanwhile the app reads nearbyd's Version every 50 ms. Every
call has a 60 s timeout.
"""
import asyncio
import json
import sys
import time

from dbus_next import DBusError, Variant
from dbus_next.aio import MessageBus


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


async def timed(who, call):
    started = time.monotonic()
    try:
        await asyncio.wait_for(call, 60)
        say(who=who, outcome="ok", seconds=time.monotonic() - started)
    except DBusError as error:
        say(who=who, outcome=error.type, message=error.text[:300], seconds=time.monotonic() - started)


async def interface(address):
    bus = await MessageBus(bus_address=address).connect()
    root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
    return root.get_interface("org.nearbyd.Nearby1")


async def main(address, size, calls):
    flooder, app = await interface(address), await interface(address)
    junk = bytes(int(size))
    done = asyncio.Event()

    async def flood():
        for _ in range(int(calls)):
            await timed("flood", flooder.call_create_manager("key", {"Junk": Variant("ay", junk)}))
        done.set()

    async def usual():
        while not done.is_set():
            await timed("app", app.get_version())
            await asyncio.sleep(0.05)

    await asyncio.gather(flood(), usual())
    say(who="done")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
