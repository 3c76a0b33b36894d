"""The devices of `nearby-bench soak`: clients of nearby-server's HTTP API
directly (aiohttp), as a device's own Nearby stack would be, that register,
publish, subscribe, open their stream, report hearing each other, and
disappear.

  soak_devices.py SERVER_URL API_KEY [options]

Each of --devices devices, at most --concurrency at once: POST /v1/devices
with the API key, a token, a publication and a subscription of type "soak"
that expire after --ttl seconds, its stream (WebSocket), a sighting report of
up to three devices live at the time and of the --hear tokens (nearbyd's),
--linger seconds at most reading found and lost, then gone: a --silent-share
of them drop their connections without a word (no DELETE, no WebSocket
close), the others DELETE /v1/devices/{device}. A registration answered 429
(a rate limit) is tried again after Retry-After, or a growing delay, and
counted. Choices come from a generator seeded with --seed and the device's
index. Prints one line at the end:

  {"event": "done", "counts": {...}, "seconds": S}

with counts of each step's outcome ("register 201", "register 429",
"found", "lost", "silent", "delete 204", ...).
"""
import argparse
import asyncio
import base64
import collections
import json
import random
import time

import aiohttp


class Devices:
    def __init__(self, args):
        self.args = args
        self.counts = collections.Counter()
        # The tokens of the devices live now, which the next ones report hearing.
        self.live = {}

    def count(self, what, status):
        self.counts["%s %s" % (what, status)] += 1
        return status

    async def register(self, session, deadline):
        """The device's registration, after waiting out any 429s; None if refused."""
        delay = 0.1
        while True:
            async with session.post(self.args.server + "/v1/devices", headers={"X-Api-Key": self.args.key}) as answer:
                if self.count("register", answer.status) == 201:
                    return await answer.json()
                if answer.status != 429 or time.monotonic() > deadline:
                    return None
                retry = answer.headers.get("Retry-After", "")
                wait = float(retry) if retry.replace(".", "", 1).isdigit() else delay
            await asyncio.sleep(min(wait, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)

    async def put(self, session, url, headers, body, what):
        async with session.put(url, headers=headers, json=body) as answer:
            self.count(what, answer.status)
            return answer.status == 200

    async def device(self, index):
        rng = random.Random(self.args.seed * 1_000_003 + index)
        # Its own session: going silent closes its connections, as a device that vanished would.
        session = aiohttp.ClientSession()
        silent = rng.random() < self.args.silent_share
        try:
            registration = await self.register(session, time.monotonic() + self.args.register_patience)
            if registration is None:
                return
            device, secret = registration["device"], registration["secret"]
            base = "%s/v1/devices/%s" % (self.args.server, device)
            auth = {"Authorization": "Bearer " + secret}
            async with session.post(base + "/tokens", headers=auth) as answer:
                if self.count("token", answer.status) != 201:
                    return
                token = (await answer.json())["token"]
            expires = int(time.time() * 1000) + self.args.ttl * 1000
            content = base64.b64encode(rng.randbytes(rng.randint(16, 512))).decode()
            await self.put(session, base + "/publications/p0", auth,
                           {"namespace": "", "type": "soak", "content": content, "mediums": ["ble"], "mode": "both",
                            "expiresAtMs": expires}, "publication")
            await self.put(session, base + "/subscriptions/s0", auth,
                           {"namespace": "", "type": "soak", "mediums": ["ble"], "mode": "both", "expiresAtMs": expires},
                           "subscription")
            stream = await session.ws_connect(base + "/stream", headers=auth, autoping=True)
            self.counts["stream opened"] += 1
            peers = rng.sample(sorted(self.live.values()), min(3, len(self.live)))
            self.live[index] = token
            now = int(time.time() * 1000)
            seen = [{"token": heard, "medium": "ble", "rssi": -60, "distance": 1.0, "seenAtMs": now}
                    for heard in peers + self.args.hear]
            async with session.post(base + "/sightings", headers=auth, json={"seen": seen, "gone": []}) as answer:
                if self.count("sightings", answer.status) == 200:
                    for result in (await answer.json())["results"]:
                        self.counts["sighting " + result.get("status", "?")] += 1
            await self.read(stream, rng.uniform(0, self.args.linger))
            self.live.pop(index, None)
            if silent:
                self.counts["silent"] += 1
                return
            async with session.delete(base, headers=auth) as answer:
                self.count("delete", answer.status)
            await stream.close()
        finally:
            self.live.pop(index, None)
            await session.close()

    async def read(self, stream, seconds):
        """Counts the stream's events for `seconds`, or until the server closes it."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await stream.receive(timeout=left)
            except asyncio.TimeoutError:
                return
            if message.type != aiohttp.WSMsgType.TEXT:
                self.counts["stream ended %s" % message.type.name] += 1
                return
            event = json.loads(message.data).get("event", "?")
            self.counts[event] += 1

    async def run(self):
        indices = iter(range(self.args.devices))

        async def worker():
            for index in indices:
                await self.device(index)

        await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))


async def main(args):
    start = time.monotonic()
    devices = Devices(args)
    await devices.run()
    print(json.dumps({"event": "done", "counts": dict(sorted(devices.counts.items())),
                      "seconds": round(time.monotonic() - start, 1)}, sort_keys=True), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("server", help="nearby-server's URL, http://HOST:PORT")
    parser.add_argument("key", help="the project's API key")
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--silent-share", type=float, default=0.5)
    parser.add_argument("--ttl", type=int, default=30, help="seconds until a device's publication and subscription expire")
    parser.add_argument("--linger", type=float, default=2.0, help="most seconds a device stays")
    parser.add_argument("--hear", type=lambda text: [t for t in text.split(",") if t], default=[],
                        help="tokens every device reports hearing, comma-separated")
    parser.add_argument("--register-patience", type=float, default=60.0,
                        help="seconds a device keeps trying a registration answered 429")
    asyncio.run(main(parser.parse_args()))
