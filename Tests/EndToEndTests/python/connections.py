#!/usr/bin/python3
"""Many connections to nearbyd from one user, each making a manager, as a
program that wants to take every slot would. Prints one JSON line per
connection (its CreateManager's outcome), then "holding", and keeps them
all open until killed.

  connections.py BUS API_KEY COUNT
"""
import asyncio
import json
import sys

from dbus_next import DBusError
from dbus_next.aio import MessageBus


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


async def main(address, api_key, count):
    buses = []
    for index in range(int(count)):
        bus = await MessageBus(bus_address=address).connect()
        buses.append(bus)
        root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
        try:
            await root.get_interface("org.nearbyd.Nearby1").call_create_manager(api_key, {})
            say(connection=index, outcome="ok")
        except DBusError as error:
            say(connection=index, outcome=error.type, message=error.text)
    say(event="holding")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
