"""The loads of `nearby-bench isolation`: D-Bus clients that hammer nearbyd
as fast as they can while the benchmark measures how long another client
waits for its answers.

  isolation_load.py MODE BUS [options]

MODE is one of
  set-permission  SetPermission for one of --apps apps, granted and revoked
                  in turn: each a decision written to disk
  big-args        CreateManager carrying --size bytes (an "ay") in an unknown
                  params key, refused by nearbyd; one at a time per connection
  big-args-reference
                  the same bytes to the reference C service instead
                  (Register(ay, s, s) of svc_sdbus, named --reference): what
                  carrying them costs a service that does nothing with them
  publish-churn   Publish then Unpublish, on a manager per connection
  send-flood      Upstream1.SendMessage with a new message id each time, on a
                  manager per connection whose direct channel is wanted
                  (refused with LimitExceeded while its app has
                  [upstream] max-pending messages waiting)

--connections connections each keep --window calls in flight (big-args: one).
Prints {"event": "running"} once every connection is set up, and on SIGTERM
{"event": "stopped", "outcomes", "calls", "seconds"}: "outcomes" counts
each answer ("SetPermission ok", or the error's name) since the start,
"calls" the answers since "running", in "seconds".
"""
import argparse
import asyncio
import itertools
import signal
import time

from dbus_next import Variant

import nearbyd_calls as nearbyd


async def set_permission(bus, args, tally, _):
    for number in itertools.count():
        app = "org.example.iso%d" % (number % args.apps)
        await tally.run("SetPermission", nearbyd.call(bus, nearbyd.ROOT, nearbyd.NEARBY1, "SetPermission", "sba{sv}",
                                                      [app, number % 2 == 0, {}]))


async def big_args(bus, args, tally, _):
    junk = bytes(args.size)
    while True:
        await tally.run("CreateManager", nearbyd.create_manager(bus, args.key, {"Junk": Variant("ay", junk)}))


async def big_args_reference(bus, args, tally, _):
    junk = bytes(args.size)
    while True:
        await tally.run("Register", nearbyd.call(bus, "/probe", "probe.Svc", "Register", "ayss", [junk, "a", "b"],
                                                 destination=args.reference))


async def publish_churn(bus, args, tally, manager):
    content = b"isolation " * 10
    while True:
        path = await tally.run("Publish", nearbyd.publish(bus, manager, content, "iso"))
        if path:
            await tally.run("Unpublish", nearbyd.call(bus, path, "org.nearbyd.Publication1", "Unpublish"))


async def send_flood(bus, args, tally, manager, ids=itertools.count()):
    while True:
        message_id = "flood-%d" % next(ids)
        await tally.run("SendMessage", nearbyd.send_message(bus, manager, args.to, message_id, 60))


async def connection(args, tally, number, ready):
    bus = await nearbyd.connect(args.bus)
    manager = None
    if args.mode in ("publish-churn", "send-flood"):
        manager = await nearbyd.create_app_manager(bus, args.key, "org.example.load%d" % number)
    if args.mode == "send-flood":
        await nearbyd.set_direct_channel(bus, manager, True)
    ready.release()
    load = {"set-permission": set_permission, "big-args": big_args, "big-args-reference": big_args_reference,
            "publish-churn": publish_churn, "send-flood": send_flood}[args.mode]
    window = 1 if args.mode.startswith("big-args") else args.window
    await asyncio.gather(*(load(bus, args, tally, manager) for _ in range(window)))


async def main(args):
    tally = nearbyd.Tally()
    ready = asyncio.Semaphore(0)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    loads = [asyncio.create_task(connection(args, tally, number, ready)) for number in range(args.connections)]
    for _ in loads:
        await ready.acquire()
    start, before = time.monotonic(), sum(tally.counts.values())
    nearbyd.say(event="running")
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait(loads + [stopping], return_when=asyncio.FIRST_COMPLETED)
    seconds = time.monotonic() - start
    for task in loads:
        task.cancel()
    for task in done:
        if task is not stopping:
            task.result()  # a load that ended by itself failed: its error ends the script
    nearbyd.say(event="stopped", outcomes=tally.as_dict(), calls=sum(tally.counts.values()) - before, seconds=round(seconds, 1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["set-permission", "big-args", "big-args-reference", "publish-churn", "send-flood"])
    parser.add_argument("bus")
    parser.add_argument("--key", default="isolation", help="API key of the managers")
    parser.add_argument("--to", default="isolation@nearby.test", help="send-flood's recipient, SENDER_ID@DOMAIN")
    parser.add_argument("--connections", type=int, default=3)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--apps", type=int, default=8)
    parser.add_argument("--size", type=int, default=30 << 20)
    parser.add_argument("--reference", default="probe.Ref", help="the reference service's bus name")
    asyncio.run(main(parser.parse_args()))
