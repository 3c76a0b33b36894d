"""The D-Bus clients of `nearby-bench soak`: apps that connect to nearbyd,
make a manager, publish and subscribe, some send upstream messages, and
leave. Each client is its own D-Bus connection; its choices come from a
random generator seeded with --seed and its index, so a run can be repeated.

  soak_clients.py churn BUS [options]
      --clients clients, at most --concurrency connected at once, each
      living its life and leaving: a --release-share of them cleanly
      (Unpublish, Unsubscribe, Release, then disconnect), the others by
      closing their connection with everything still live. Prints one line
      at the end: {"event": "done", "outcomes", "events", "seconds"}.
  soak_clients.py hold BUS [options]
      --clients clients at once that publish, subscribe and stay; prints
      {"event": "holding", "outcomes"} and waits to be killed (the benchmark
      kills it with SIGKILL: clients that vanish without a word).
  soak_clients.py drain BUS [options]
      One connection per API key with a manager of every app (--apps), the
      direct channel wanted on those of --upstream-key: every verdict still
      kept for an app is told to it, and pending messages go out. Prints
      {"event": "draining", "outcomes"} and stays until terminated.

"outcomes" counts each method's answers: "Publish ok", or the error's name.
"events" counts the signals received (MessageFound, SendSucceeded,
SendFailed) and how the clients left ("left cleanly", "closed its
connection").
"""
import argparse
import asyncio
import collections
import random
import time

from dbus_next import MessageType

import nearbyd_calls as nearbyd


def count_signal(message, signals):
    if message.message_type == MessageType.SIGNAL and message.member in ("MessageFound", "SendSucceeded", "SendFailed"):
        signals[message.member] += 1


class Client:
    """One app's connection and what it made."""

    def __init__(self, args, index, tally, signals):
        self.args = args
        self.index = index
        self.tally = tally
        self.signals = signals
        self.random = random.Random(args.seed * 1_000_003 + index)
        self.key = self.random.choice(args.keys)
        self.app = "org.example.soak%d" % self.random.randrange(args.apps)
        self.bus = None
        self.manager = None
        self.publications = []
        self.subscription = None

    def heard(self, message):
        count_signal(message, self.signals)

    async def arrive(self):
        """Connects, makes a manager, publishes, subscribes and maybe sends upstream."""
        self.bus = await nearbyd.connect(self.args.bus)
        self.bus.add_message_handler(self.heard)
        run = self.tally.run
        self.manager = await run("CreateManager", nearbyd.create_app_manager(self.bus, self.key, self.app))
        if self.manager is None:
            return
        for _ in range(self.random.randint(1, 3)):
            content = self.random.randbytes(self.random.randint(16, 1024))
            path = await run("Publish", nearbyd.publish(self.bus, self.manager, content, "soak"))
            if path:
                self.publications.append(path)
        self.subscription = await run("Subscribe", nearbyd.subscribe(self.bus, self.manager, "soak"))
        if self.key == self.args.upstream_key and self.random.random() < self.args.upstream_share:
            await run("DirectChannel", nearbyd.set_direct_channel(self.bus, self.manager, True))
            for number in range(self.random.randint(1, 3)):
                message_id = "s%d-c%d-m%d" % (self.args.seed, self.index, number)
                await run("SendMessage", nearbyd.send_message(self.bus, self.manager, self.args.upstream_to,
                                                              message_id, self.args.upstream_ttl))

    async def leave(self, cleanly):
        """Ends what it made and releases its manager, or just goes."""
        run = self.tally.run
        if cleanly and self.manager is not None:
            for path in self.publications:
                await run("Unpublish", nearbyd.call(self.bus, path, "org.nearbyd.Publication1", "Unpublish"))
            if self.subscription:
                await run("Unsubscribe", nearbyd.call(self.bus, self.subscription, "org.nearbyd.Subscription1",
                                                      "Unsubscribe"))
            await run("Release", nearbyd.call(self.bus, self.manager, nearbyd.MANAGER1, "Release"))
        self.signals["left cleanly" if cleanly else "closed its connection"] += 1
        if self.bus is not None:
            self.bus.disconnect()
            await self.bus.wait_for_disconnect()


async def churn(args, tally, signals):
    indices = iter(range(args.first, args.first + args.clients))

    async def worker():
        for index in indices:
            client = Client(args, index, tally, signals)
            try:
                await client.arrive()
                # Long enough for the server to match it, and for others to find it.
                await asyncio.sleep(client.random.uniform(0, args.linger))
            finally:
                await client.leave(cleanly=client.random.random() < args.release_share)

    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    nearbyd.say(event="done", outcomes=tally.as_dict(), events=dict(sorted(signals.items())),
                seconds=round(time.monotonic() - start, 1))


async def hold(args, tally, signals):
    clients = [Client(args, index, tally, signals) for index in range(args.first, args.first + args.clients)]
    await asyncio.gather(*(client.arrive() for client in clients))
    nearbyd.say(event="holding", outcomes=tally.as_dict())
    await asyncio.Event().wait()


async def drain(args, tally, signals):
    buses = []
    for key in args.keys:
        bus = await nearbyd.connect(args.bus)
        bus.add_message_handler(lambda message: count_signal(message, signals))
        buses.append(bus)
        for app in range(args.apps):
            manager = await tally.run("CreateManager", nearbyd.create_app_manager(bus, key, "org.example.soak%d" % app))
            if manager and key == args.upstream_key:
                await tally.run("DirectChannel", nearbyd.set_direct_channel(bus, manager, True))
    nearbyd.say(event="draining", outcomes=tally.as_dict())
    await asyncio.Event().wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["churn", "hold", "drain"])
    parser.add_argument("bus")
    parser.add_argument("--keys", required=True, type=lambda text: text.split(","), help="API keys, comma-separated")
    parser.add_argument("--apps", type=int, default=8, help="AppIds the clients share")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--first", type=int, default=0, help="index of the first client (seeds and message ids)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--release-share", type=float, default=0.5)
    parser.add_argument("--linger", type=float, default=0.2, help="most seconds a client stays")
    parser.add_argument("--upstream-key", help="the API key whose clients send upstream messages")
    parser.add_argument("--upstream-to", default="soak@nearby.test")
    parser.add_argument("--upstream-share", type=float, default=0.3)
    parser.add_argument("--upstream-ttl", type=int, default=60)
    args = parser.parse_args()
    mode = {"churn": churn, "hold": hold, "drain": drain}[args.mode]
    asyncio.run(mode(args, nearbyd.Tally(), collections.Counter()))


if __name__ == "__main__":
    main()
