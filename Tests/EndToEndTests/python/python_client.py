#!/usr/bin/python3
"""The Python client (clients/python) as an app uses it, for PythonClientTests:

  python_client.py publish BUS KEY TEXT     publish TEXT (type chat) until SIGTERM
  python_client.py subscribe BUS KEY        subscribe to chat, print found and lost
  python_client.py upstream BUS KEY TO      print the status; send one upstream message to TO
                                            with the direct channel open, print its verdict;
                                            revoke and grant the app's permission
  python_client.py beacons BUS KEY          subscribe to the project's beacons' attachments,
                                            then, one found, to raw beacons; print what is found
  python_client.py background BUS KEY       publish twice (one with allow_in_background), go to the
                                            background and back, print each change and the statuses
  python_client.py agent BUS KEY            register a permission agent that says yes; publish as an
                                            app, print what the agent was asked and another
                                            connection's call of it; then, for each line on stdin (after
                                            a restart of nearbyd), publish as another app
  python_client.py dialog BUS KEY           publish with the app's own permission dialog, which says
                                            yes; print what it was asked, the decision, and what
                                            another connection's call of the dialog is answered

Prints one JSON line per event: {"event": "published"|"subscribed"|"found"|"lost",
"text", "medium", "distance"}, and {"event": "error", "name", "message"} when a
call is refused.
"""
import asyncio
import json
import signal
import sys

from dbus_fast import Message as DBusMessage
from dbus_fast.aio import MessageBus

from nearby import MessageManager, NearbyError, PermissionAgent, Strategy, Upstream, status


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


async def upstream(bus, key, to):
    now = await status(bus)
    say(event="status", version=now.version, mediums=now.available_mediums, server=now.server)
    verdict = asyncio.get_running_loop().create_future()
    handlers = Upstream(succeeded=lambda id: verdict.set_result(("succeeded", id, "")),
                        failed=lambda id, error, why: verdict.set_result(("failed", id, error)))
    manager = await MessageManager.create(key, app_id="org.example.PythonClient", bus_address=bus, upstream=handlers)
    await manager.set_direct_channel(True)
    await manager.send({"n": "1"}, to, "py-1", ttl_seconds=60)
    outcome, id, error = await asyncio.wait_for(verdict, 30)
    say(event=outcome, id=id, error=error)
    await manager.set_permission_granted(False)
    say(event="permission", granted=await manager.permission_granted())
    await manager.set_permission_granted(True)
    say(event="permission", granted=await manager.permission_granted())
    await manager.release()


async def background(bus, key):
    changes = asyncio.Queue()
    manager = await MessageManager.create(key, app_id="org.example.PythonClient", bus_address=bus,
                                          on_background_changed=changes.put_nowait)
    foreground = await manager.publish(b"in the foreground", type="chat")
    anyway = await manager.publish(b"in the background too", type="chat",
                                   strategy=Strategy(mediums=["ble"], allow_in_background=True))
    for wanted in (True, False):
        await manager.set_background(wanted)
        # nearbyd changes the objects' statuses before it answers the Set.
        say(event="background", changed=await asyncio.wait_for(changes.get(), 10), now=await manager.background(),
            foreground=(await foreground.status())[0], anyway=(await anyway.status())[0])
    await manager.release()


async def dialog(bus, key):
    async def ask(mediums):
        say(event="asked", mediums=mediums)
        return True
    manager = await MessageManager.create(key, app_id="org.example.PythonDialog", bus_address=bus)
    publication = await manager.publish(b"asked first", type="chat", permission_request=ask)
    say(event="published", granted=await manager.permission_granted())
    # Only nearbyd may answer for the app: another connection's call is refused.
    other = await MessageBus(bus_address=bus).connect()
    reply = await other.call(DBusMessage(destination=manager.bus.unique_name, path=publication.dialog,
                                         interface="org.nearbyd.PermissionRequest1", member="Request",
                                         signature="as", body=[["ble"]]))
    say(event="forged", type=reply.message_type.name, error=reply.error_name)
    other.disconnect()
    await manager.release()


async def agent(bus, key):
    async def ask(request):
        say(event="asked", app_id=request.app_id, mediums=request.mediums, user=request.details.get("User"))
        return True
    again = asyncio.Event()
    registered = await PermissionAgent.register(ask, bus_address=bus, on_registered_again=again.set)
    say(event="registered")
    for number in range(2):
        if number:
            # The test restarts nearbyd, then writes a line; the agent registers again by itself.
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            await asyncio.wait_for(again.wait(), 20)
            say(event="registered again")
        manager = await MessageManager.create(key, app_id=f"org.example.PythonAgent{number}", bus_address=bus)
        await manager.publish(b"asked the agent", type="chat")
        say(event="published", granted=await manager.permission_granted())
        await manager.release()
        if not number:
            other = await MessageBus(bus_address=bus).connect()
            reply = await other.call(DBusMessage(destination=registered.bus.unique_name, path=registered.path,
                                                 interface="org.nearbyd.PermissionAgent1", member="RequestPermission",
                                                 signature="sasa{sv}", body=["org.example.Forged", ["ble"], {}]))
            say(event="forged", type=reply.message_type.name, error=reply.error_name)
            other.disconnect()
    await registered.unregister()


async def main(role, bus, key, *rest):
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if role in ("upstream", "background", "dialog", "agent"):
        try:
            await {"upstream": lambda: upstream(bus, key, rest[0]), "background": lambda: background(bus, key),
                   "dialog": lambda: dialog(bus, key), "agent": lambda: agent(bus, key)}[role]()
        except NearbyError as error:
            say(event="error", name=error.name, message=error.message)
        return
    try:
        manager = await MessageManager.create(key, app_id="org.example.PythonClient", bus_address=bus)
        if role == "beacons":
            heard = lambda event: lambda message, info: say(event=event, namespace=message.namespace, type=message.type,
                                                            content=message.content.hex(), kind=info.beacon.kind,
                                                            id=info.beacon.id)
            in_range = asyncio.Event()

            def attachment(message, info):
                heard("attachment")(message, info)
                in_range.set()
            await manager.subscribe_beacons(on_found=attachment)
            say(event="subscribed")
            # Subscribed once the beacon is in range: its raw sighting is found all the same.
            await asyncio.wait_for(in_range.wait(), 30)
            await manager.subscribe_beacons(raw=True, on_found=heard("raw"))
        elif role == "publish":
            await manager.publish(rest[0].encode(), type="chat")
            say(event="published")
        else:
            report = lambda event: lambda message, info: say(event=event, text=message.content.decode(),
                                                             medium=info.medium, distance=info.distance)
            subscription = await manager.subscribe(type="chat", on_found=report("found"), on_lost=report("lost"))
            say(event="subscribed", path=subscription.path)
    except NearbyError as error:
        say(event="error", name=error.name, message=error.message)
        return
    await stop.wait()
    await manager.release()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
