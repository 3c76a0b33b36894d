#!/usr/bin/python3
"""Permission parts of nearbyd's API driven from dbus-next, as a desktop's
agent or a Python app would. Prints one JSON line per event.

  permissions.py agent BUS ANSWER
      Registers an org.nearbyd.PermissionAgent1 and answers every request with
      ANSWER: grant, deny, or silent (never answers). Prints "registered", then
      "request" (app_id, mediums, details) per request. Runs until killed.
  permissions.py app BUS API_KEY APP_ID HANDLER [TYPE]
      Creates a manager (with usage descriptions) and publishes TYPE (default
      "perm"). HANDLER is the answer of the app's own PermissionRequest1 dialog
      (grant, deny; release: it releases the manager, then grants) or none. Prints "published" or "error" (name, message),
      "asked" when its dialog is asked, then "permission" and "status" changes.
      Runs until killed.
  permissions.py toggle BUS API_KEY APP_ID true|false
      Sets PermissionGranted from a manager of its own; prints "set" or "error",
      then "permission" changes. Runs until killed.
  permissions.py decisions BUS OTHER_APP OWN_APP
      What a caller reaches of its user's decisions: prints "get", "set" and
      "set_own" (GetPermission of OTHER_APP, SetPermission of OTHER_APP to
      false, of OWN_APP to true: each "ok" or the error's name), then
      "listed" (the AppIds ListPermissions returns). Runs until killed.

With --wait first, each prints "waiting" (its pid) and waits for a line on
stdin before it connects, so that a test can first place it in a control
group (as Flatpak would) or a logind session: nearbyd reads who a caller is
when it first calls.
"""
import asyncio
import json
import os
import sys

from dbus_next import DBusError, Variant
from dbus_next.aio import MessageBus
from dbus_next.service import ServiceInterface, method


def say(**fields):
    print(json.dumps(fields), flush=True)


def plain(value):
    return value.value if isinstance(value, Variant) else value


class Agent(ServiceInterface):
    def __init__(self, answer):
        super().__init__("org.nearbyd.PermissionAgent1")
        self.answer = answer

    @method(name="RequestPermission")
    async def request_permission(self, app_id: "s", mediums: "as", details: "a{sv}") -> "b":
        say(event="request", app_id=app_id, mediums=mediums, details={k: plain(v) for k, v in details.items()})
        if self.answer == "silent":
            await asyncio.Event().wait()
        return self.answer == "grant"


class Dialog(ServiceInterface):
    def __init__(self, answer, manager_interface):
        super().__init__("org.nearbyd.PermissionRequest1")
        self.answer = answer
        self.manager_interface = manager_interface

    @method(name="Request")
    async def request(self, mediums: "as") -> "b":
        say(event="asked", mediums=mediums)
        if self.answer == "release":
            await self.manager_interface.call_release()
            say(event="released")
            return True
        return self.answer == "grant"


async def nearby(bus):
    root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
    return root.get_interface("org.nearbyd.Nearby1")


async def manager(bus, api_key, app_id):
    path = await (await nearby(bus)).call_create_manager(api_key, {
        "AppId": Variant("s", app_id),
        "MicrophoneUsageDescription": Variant("s", "to hear the shop's beacons"),
        "BluetoothUsageDescription": Variant("s", "to find nearby friends"),
    })
    proxy = bus.get_proxy_object("org.nearbyd", path, await bus.introspect("org.nearbyd", path))
    return proxy.get_interface("org.nearbyd.Manager1"), proxy.get_interface("org.freedesktop.DBus.Properties")


async def agent(bus, answer):
    bus.export("/org/example/agent", Agent(answer))
    try:
        await (await nearby(bus)).call_register_permission_agent("/org/example/agent")
        say(event="registered")
    except DBusError as error:
        say(event="refused", name=error.type, message=error.text)
    await asyncio.Event().wait()


async def app(bus, api_key, app_id, handler, message_type="perm"):
    manager_interface, manager_properties = await manager(bus, api_key, app_id)

    def manager_changed(interface, values, invalidated):
        if "PermissionGranted" in values:
            say(event="permission", granted=values["PermissionGranted"].value)

    manager_properties.on_properties_changed(manager_changed)
    params = {}
    if handler != "none":
        bus.export("/org/example/dialog", Dialog(handler, manager_interface))
        params["PermissionRequestHandler"] = Variant("o", "/org/example/dialog")
    try:
        path = await manager_interface.call_publish(b"hello", message_type, params)
    except DBusError as error:
        say(event="error", name=error.type, message=error.text)
        await asyncio.Event().wait()
    proxy = bus.get_proxy_object("org.nearbyd", path, await bus.introspect("org.nearbyd", path))

    def changed(interface, values, invalidated):
        if "Status" in values:
            say(event="status", status=values["Status"].value)

    proxy.get_interface("org.freedesktop.DBus.Properties").on_properties_changed(changed)
    say(event="published", path=path, status=await proxy.get_interface("org.nearbyd.Publication1").get_status())
    await asyncio.Event().wait()


async def toggle(bus, api_key, app_id, granted):
    manager_interface, manager_properties = await manager(bus, api_key, app_id)

    def manager_changed(interface, values, invalidated):
        if "PermissionGranted" in values:
            say(event="permission", granted=values["PermissionGranted"].value)

    manager_properties.on_properties_changed(manager_changed)
    try:
        await manager_interface.set_permission_granted(granted == "true")
        say(event="set")
    except DBusError as error:
        say(event="error", name=error.type, message=error.text)
    # Still listening: a decision the disk refuses is undone after the setter answered.
    await asyncio.Event().wait()


async def outcome(call):
    try:
        await call
        return "ok"
    except DBusError as error:
        return error.type


async def decisions(bus, other_app, own_app):
    interface = await nearby(bus)
    say(event="get", outcome=await outcome(interface.call_get_permission(other_app, {})))
    say(event="set", outcome=await outcome(interface.call_set_permission(other_app, False, {})))
    say(event="set_own", outcome=await outcome(interface.call_set_permission(own_app, True, {})))
    listed = await interface.call_list_permissions({})
    say(event="listed", apps=sorted(plain(entry["AppId"]) for entry in listed))
    await asyncio.Event().wait()


async def main(command, *arguments):
    if command == "--wait":
        say(event="waiting", pid=os.getpid())
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        command, *arguments = arguments
    address, *arguments = arguments
    bus = await MessageBus(bus_address=address).connect()
    await {"agent": agent, "app": app, "toggle": toggle, "decisions": decisions}[command](bus, *arguments)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
