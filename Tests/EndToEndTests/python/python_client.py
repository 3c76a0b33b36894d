#!/usr/bin/python3
"""The Python client (clients/python) as an app uses it, for PythonClientTests:

  python_client.py publish BUS KEY TEXT     publish TEXT (type chat) until SIGTERM
  python_client.py subscribe BUS KEY        subscribe to chat, print found and lost

Prints one JSON line per event: {"event": "published"|"subscribed"|"found"|"lost",
"text", "medium", "distance"}, and {"event": "error", "name", "message"} when a
call is refused.
"""
import asyncio
import json
import signal
import sys

from nearby import MessageManager, NearbyError


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


async def main(role, bus, key, *rest):
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        manager = await MessageManager.create(key, app_id="org.example.PythonClient", bus_address=bus)
        if role == "publish":
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
