#!/usr/bin/python3
"""A nearbyd client written with dbus-next, as a Python app would be.

Usage: subscribe.py BUS_ADDRESS API_KEY TYPE
Creates a manager and a subscription for TYPE, prints one JSON line per
event ("subscribed", "status", "found", "lost") and exits 0 after the first
message it found is lost.
"""
import asyncio
import json
import sys

from dbus_next import Variant
from dbus_next.aio import MessageBus


def say(**fields):
    print(json.dumps(fields), flush=True)


async def main(address, api_key, message_type):
    bus = await MessageBus(bus_address=address).connect()
    root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
    nearby = root.get_interface("org.nearbyd.Nearby1")
    manager_path = await nearby.call_create_manager(api_key, {"AppId": Variant("s", "org.example.PythonApp")})
    manager = bus.get_proxy_object(
        "org.nearbyd", manager_path, await bus.introspect("org.nearbyd", manager_path)
    ).get_interface("org.nearbyd.Manager1")
    params = {"Type": Variant("s", message_type), "Strategy": Variant("a{sv}", {"Mode": Variant("s", "both")})}
    subscription_path = await manager.call_subscribe(params)
    proxy = bus.get_proxy_object("org.nearbyd", subscription_path, await bus.introspect("org.nearbyd", subscription_path))
    subscription = proxy.get_interface("org.nearbyd.Subscription1")
    properties = proxy.get_interface("org.freedesktop.DBus.Properties")
    done = asyncio.get_running_loop().create_future()

    def found(content, namespace, type_, info):
        say(event="found", content=bytes(content).decode(), namespace=namespace, type=type_,
            medium=info["Medium"].value, rssi=info["Rssi"].value)

    def lost(content, namespace, type_, info):
        say(event="lost", content=bytes(content).decode())
        if not done.done():
            done.set_result(None)

    def changed(interface, values, invalidated):
        if "Status" in values:
            say(event="status", status=values["Status"].value)

    subscription.on_message_found(found)
    subscription.on_message_lost(lost)
    properties.on_properties_changed(changed)
    say(event="subscribed", path=subscription_path, status=await subscription.get_status())
    await asyncio.wait_for(done, timeout=60)
    await subscription.call_unsubscribe()
    bus.disconnect()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
