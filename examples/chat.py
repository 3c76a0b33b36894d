#!/usr/bin/env python3
"""A small app on the Python client (clients/python): says who is here to
the devices nearby, and prints who comes and goes.

  chat.py --api-key KEY NAME [--bus ADDRESS]

Publishes "NAME is here" as a `chat` message and subscribes to the others';
prints `here: TEXT (N.N m)` when one is found and `gone: TEXT` when it is
lost, until Ctrl-C or SIGTERM. Without --bus it uses the system bus, where
the installed nearbyd serves.
"""

import argparse
import asyncio
import signal

from nearby import MessageManager, NearbyError


async def main(args):
    stop = asyncio.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(number, stop.set)
    try:
        manager = await MessageManager.create(args.api_key, app_id="org.example.Chat", bus_address=args.bus)
        await manager.publish(f"{args.name} is here".encode(), type="chat")
        await manager.subscribe(
            type="chat",
            on_found=lambda message, info: print(f"here: {message.content.decode()} ({info.distance:.1f} m)", flush=True),
            on_lost=lambda message, _: print(f"gone: {message.content.decode()}", flush=True))
    except NearbyError as error:
        print(f"chat: {error.message} ({error.name})", flush=True)
        raise SystemExit(1)
    print(f"{args.name}: listening", flush=True)
    await stop.wait()
    await manager.release()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Say who is here to the devices nearby, and see who comes and goes.")
    parser.add_argument("name")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--bus", help="a D-Bus address (default: the system bus)")
    asyncio.run(main(parser.parse_args()))
