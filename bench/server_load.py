"""The load generator of `nearby-bench server`: simulated devices that speak
nearby-server's device API directly (aiohttp), as a device's own Nearby
stack would, and a small PostgreSQL client for the database's own floor.

  server_load.py worker --urls URL[,URL] --key API_KEY --devices N --idle M [options]
  server_load.py appserver --port PORT --domain DOMAIN --project NAME --key SERVER_KEY --ca PEM
  server_load.py pg-notify --socket-dir DIR --user USER --database DB [--count N]
  server_load.py sqlite-insert --path FILE [--seconds S]

worker: one process of the generator, driven by the benchmark through JSON
commands on standard input, one a line, each answered on standard output
with one line `{"done": ID, "result": {...}}` (after `{"measuring": ID}`
when its measured window begins, so that the benchmark reads the processes'
CPU over the same window). Its devices:

- --devices moving devices: each registers (POST /v1/devices), takes a
  token, publishes p0 (type "bench", mode broadcast, BLE; its content names
  the device) and subscribes s0 (type "bench", mode scan), and opens its
  stream. Each sighting report moves it: one of the --neighbours tokens it
  hears is reported gone and another device's token is heard instead (all
  others refreshed), so an edge ends and one appears, and its stream gets
  `lost` and `found` (the subscriber is the observer: its subscription scans,
  the publication it hears broadcasts). Neighbours are devices of the same
  process: a process is a neighbourhood.
- --idle devices that only register and hold a stream, for the count of
  streams a server holds.
- upstream: the first moving devices open their direct channel (GET
  /v1/devices/{device}/channel) and send upstream messages to --to (the
  project's application server), each waiting for its `sent` event; a
  device keeps `in_flight` messages out at once, sending the next as each
  one's verdict comes.

Each device's stream and channel come from a source address of its own
group (127.W.x.y: --per-address devices an address, each with its stream and
channel, below the server's default `max-connections-per-address` of 256),
as devices behind different addresses would; requests go from an address of
the process's own (127.W.255.1) over one pool of at most 128 kept-alive
connections. Registrations go round robin over the --urls (a load balancer
without stickiness); a device's later requests, its stream and its channel
go to the replica that serves it, which the others redirect it to (307), as
nearbyd does.

Commands (`id` is echoed):

  {"id": 1, "do": "setup"}                       register and prepare every device
  {"id": 2, "do": "open", "within": S}           open every device's stream
  {"id": 3, "do": "close"}                       close every stream
  {"id": 4, "do": "held"}                        how many streams are open now
  {"id": 5, "do": "run", "kind": "health"|"sightings", "warmup": W, "seconds": S,
   "concurrency": C}                             closed loop: C requests in flight
  {"id": 6, "do": "run", ..., "rate": R}         open loop: R requests a second, with latencies
  {"id": 6, "do": "run", "kind": "health", "url": U, ...}   GET U/v1/health instead of the servers'
                                                 (another HTTP server, measured as a floor)
  {"id": 7, "do": "urls", "urls": [...]}         the server(s) moved (restarted on other ports)
  {"id": 8, "do": "channels", "count": N, "within": S}   open the first N moving devices' channels
  {"id": 9, "do": "upstream-start", "in_flight": K, "warmup": W, "within": S}
                                                 every open channel's device sends, K messages out at
                                                 once; answered when as many have their `sent` as
                                                 were sent at first, and W seconds have passed
  {"id": 10, "do": "upstream-window", "seconds": S}   `sent` events and their latencies for S seconds
  {"id": 11, "do": "upstream-stop", "within": S}  send no more; answered when every message out has its verdict
  {"id": 12, "do": "close-channels"}
  {"id": 13, "do": "quit"}

appserver: the application server of the upstream figure, --sessions XMPP
sessions (each TLS from the first byte, SASL PLAIN with the project's server
key, a bound resource of its own: CCS holds at most 100 messages unacked on
one connection, and application servers open several for more) on asyncio
alone, doing as little as it can per message: no
XML tree, no stanza objects (slixmpp, bench/ccs_appserver.py, builds both;
the benchmark measures its dry runs beside these). It acks every upstream
message as it comes (again if it comes again, counting that), answers the
server's pings, and takes commands on standard input like a worker:

  {"id": 1, "do": "dry-run", "to": DEVICE, "count": N, "window": W, "one_at_a_time": M}
      M downstream dry runs one at a time (round trips), then N with W in
      flight (a rate): TLS, XMPP and the connection server's CCS layer, no
      storage write, from this same client
  {"id": 2, "do": "acked"}                      upstream messages acked so far
  {"id": 3, "do": "quit"}

sqlite-insert: single-row inserts a second into a new SQLite file in WAL
mode (the server's), one connection, each its own transaction, with
--synchronous FULL (each commit synced: it survives a power cut; the
server's) or NORMAL (what GRDB sets with WAL: a commit survives the
process, and waits for no sync of the disk): the engine's commit floor on
this file system. Prints `{"inserts_per_s": R, "synchronous": N}`.

pg-notify: the round trip of a notification between two sessions of one
PostgreSQL server (NOTIFY in one, LISTEN in the other), as the replicas'
bus makes one for every event, over the wire protocol on the server's unix
socket with trust authentication (no driver needed). Prints
`{"rtt_ms": [...]}`.

Choices (neighbours, moves) come from generators seeded with --seed and
the device's index.
"""
import argparse
import asyncio
import base64
import collections
import gc
import json
import os
import random
import re
import resource
import socket
import ssl
import struct
import sys
import time
from xml.sax.saxutils import escape as xml_escape, unescape as xml_unescape

TYPE = "bench"


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Device:
    __slots__ = ("index", "id", "secret", "token", "home", "stream_url", "session", "ws", "reader", "neighbours", "rng",
                 "pending", "busy", "closed", "channel", "channel_reader", "upstream_out", "upstream_sequence")

    def __init__(self, index, seed):
        self.index = index
        self.id = None
        self.secret = None
        self.token = None
        # The replica serving the device (the others redirect its requests there), as nearbyd keeps it.
        self.home = None
        self.stream_url = None
        self.session = None
        self.ws = None
        self.reader = None
        self.neighbours = []
        self.rng = random.Random(seed * 1_000_003 + index)
        # Neighbour index → when the report that added it was sent (perf_counter), while latencies are taken.
        self.pending = {}
        self.busy = False
        self.closed = None
        self.channel = None
        self.channel_reader = None
        # Upstream message id → when it was sent (perf_counter), until its verdict comes.
        self.upstream_out = {}
        # Kept across runs: a message id the server has seen before would be answered with its old verdict.
        self.upstream_sequence = 0

    @property
    def auth(self):
        return {"Authorization": "Bearer " + self.secret}


class Upstream:
    """One process's upstream run: messages out, settled, and the latencies of those settled while measuring."""

    def __init__(self):
        self.sending = False
        self.out = 0
        self.done = 0
        self.target = 0
        self.measuring = False
        self.latencies = []
        self.outcomes = collections.Counter()
        self.warmed = asyncio.Event()
        self.drained = asyncio.Event()

    def begin(self, target):
        self.sending = True
        self.done = 0
        self.target = target
        self.outcomes = collections.Counter()
        self.warmed.clear()
        self.drained.clear()

    def settled(self, sent, latency):
        self.out -= 1
        if sent:
            self.done += 1
            if self.measuring:
                self.latencies.append(latency)
        if self.done >= self.target:
            self.warmed.set()
        if not self.sending and self.out == 0:
            self.drained.set()

    def given_up(self, device):
        """The device's channel ended: what it had out is counted as lost."""
        if device.upstream_out:
            self.outcomes["lost with the channel"] += len(device.upstream_out)
            self.out -= len(device.upstream_out)
            device.upstream_out.clear()
        if not self.sending and self.out == 0:
            self.drained.set()

    def stop(self):
        self.sending = False
        if self.out == 0:
            self.drained.set()


class Worker:
    def __init__(self, args):
        self.args = args
        self.urls = args.urls
        self.counts = collections.Counter()
        self.moving = [Device(i, args.seed) for i in range(args.devices)]
        self.idle = [Device(args.devices + i, args.seed) for i in range(args.idle)]
        self.by_token = {}
        self.next_url = 0
        self.floor_url = None  # another server that "health" asks instead, for a floor
        self.requests = None
        self.stream_sessions = {}
        self.measuring = False
        self.found_latencies = []
        self.upstream = Upstream()
        import aiohttp
        self.aiohttp = aiohttp

    # Connections.

    def url(self):
        """The next server, round robin: requests are spread as a load balancer without stickiness would."""
        self.next_url = (self.next_url + 1) % len(self.urls)
        return self.urls[self.next_url]

    def stream_session(self, device):
        """The session of the device's address, for its stream and its channel."""
        group = device.index // self.args.per_address
        address = "127.%d.%d.%d" % (self.args.process + 1, group // 250, group % 250 + 1)
        session = self.stream_sessions.get(address)
        if session is None:
            # No pool limit: each stream holds a connection for as long as it is open.
            connector = self.aiohttp.TCPConnector(limit=0, local_addr=(address, 0))
            session = self.aiohttp.ClientSession(connector=connector)
            self.stream_sessions[address] = session
        return session

    async def start(self):
        # The requests' own address, apart from the devices' (whose groups stay below 127.W.250.0), and a pool
        # below the server's default max-connections-per-address.
        connector = self.aiohttp.TCPConnector(limit=128, local_addr=("127.%d.255.1" % (self.args.process + 1), 0))
        self.requests = self.aiohttp.ClientSession(connector=connector, timeout=self.aiohttp.ClientTimeout(total=30))

    async def stop(self):
        await self.close_channels()
        await self.close_streams()
        for session in list(self.stream_sessions.values()) + [self.requests]:
            await session.close()

    # Setup.

    async def register(self, device, moving):
        base = self.url()
        async with self.requests.post(base + "/v1/devices", headers={"X-Api-Key": self.args.key}) as answer:
            self.counts["register %d" % answer.status] += 1
            if answer.status != 201:
                return False
            registration = await answer.json()
        device.id, device.secret = registration["device"], registration["secret"]
        await self.find_home(device, base)
        if not moving:
            return True
        path = "/v1/devices/%s" % device.id
        async with self.requests.post(device.home + path + "/tokens", headers=device.auth) as answer:
            self.counts["token %d" % answer.status] += 1
            if answer.status != 201:
                return False
            device.token = (await answer.json())["token"]
        # The content names the publisher, so that a found says which report made it.
        content = ("%d:%d:" % (self.args.process, device.index)).encode().ljust(64, b".")
        expires = int(time.time() * 1000) + 7_200_000
        publication = {"namespace": "", "type": TYPE, "content": base64.b64encode(content).decode(), "mediums": ["ble"],
                       "mode": "broadcast", "expiresAtMs": expires}
        subscription = {"namespace": "", "type": TYPE, "mediums": ["ble"], "mode": "scan", "expiresAtMs": 0}
        for kind, body in (("publications/p0", publication), ("subscriptions/s0", subscription)):
            async with self.requests.put(device.home + path + "/" + kind, headers=device.auth, json=body) as answer:
                self.counts["%s %d" % (kind.split("/")[0], answer.status)] += 1
                if answer.status != 200:
                    return False
        return True

    async def find_home(self, device, base):
        """The replica that serves the device: the others answer its requests 307 to it, as nearbyd finds it.
        Its requests and its stream go there from then on."""
        async with self.requests.get(base + "/v1/devices/%s/publications" % device.id, headers=device.auth,
                                     allow_redirects=False) as answer:
            await answer.read()
            self.counts["home %d" % answer.status] += 1
            home = base
            if answer.status == 307:
                location = answer.headers["Location"]
                home = location[:location.index("/v1/")]
        device.home = home
        device.stream_url = home

    async def setup(self, command):
        start = time.monotonic()
        queue = [(device, True) for device in self.moving] + [(device, False) for device in self.idle]
        failed = []

        async def worker():
            while queue:
                device, moving = queue.pop()
                try:
                    if not await self.register(device, moving):
                        failed.append(device.index)
                except Exception as error:
                    self.counts["setup %s" % type(error).__name__] += 1
                    failed.append(device.index)

        await asyncio.gather(*(worker() for _ in range(self.args.setup_concurrency)))
        self.by_token = {device.token: device for device in self.moving if device.token}
        # A registered device, for the application server's dry runs.
        registered = next((device.id for device in self.moving + self.idle if device.id), None)
        return {"counts": dict(self.counts), "failed": len(failed), "seconds": round(time.monotonic() - start, 2),
                "device": registered}

    # Streams.

    async def connect(self, device, what, outcomes):
        """The device's WebSocket `what` (stream, channel), or None, counted in outcomes."""
        try:
            return await self.stream_session(device).ws_connect(device.stream_url + "/v1/devices/%s/%s" % (device.id, what),
                                                               headers=device.auth, autoping=True, heartbeat=None)
        except self.aiohttp.WSServerHandshakeError as error:
            outcomes["refused %d" % error.status] += 1
        except Exception as error:
            outcomes["failed %s" % type(error).__name__] += 1
        return None

    async def open_stream(self, device, outcomes):
        ws = await self.connect(device, "stream", outcomes)
        if ws is None:
            return
        device.ws = ws
        device.closed = None
        device.reader = asyncio.ensure_future(self.read(device, ws))
        outcomes["opened"] += 1

    async def open(self, command):
        start = time.monotonic()
        outcomes = collections.Counter()
        devices = [d for d in self.moving + self.idle if d.id and (d.ws is None or d.closed is not None)]
        pending = iter(devices)

        async def worker():
            for device in pending:
                await self.open_stream(device, outcomes)

        try:
            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(self.args.setup_concurrency))),
                                   command.get("within", 120))
        except asyncio.TimeoutError:
            outcomes["timed out"] += 1
        # Thousands of long-lived devices and streams: out of the cyclic collector's reach from here on, so that its
        # full passes over them do not pause the generator (and show as the server's latency).
        gc.freeze()
        return {"outcomes": dict(outcomes), "open": self.open_count(), "seconds": round(time.monotonic() - start, 2)}

    def open_count(self):
        return sum(1 for d in self.moving + self.idle if d.ws is not None and d.closed is None)

    async def read(self, device, ws):
        """The stream's events until it ends: found and lost counted, found latencies taken while measuring."""
        aiohttp = self.aiohttp
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                event = json.loads(message.data)
                kind = event.get("event", "?")
                self.counts["stream " + kind] += 1
                if kind != "found":
                    continue
                content = base64.b64decode(event["match"]["content"]).split(b":")
                sent = device.pending.pop(int(content[1]), None) if len(content) > 2 else None
                if sent is not None:
                    self.found_latencies.append((time.perf_counter() - sent) * 1000)
        except Exception as error:
            self.counts["stream error %s" % type(error).__name__] += 1
        device.closed = ws.close_code if ws.close_code is not None else -1
        self.counts["stream closed %s" % device.closed] += 1

    async def close_streams(self):
        for device in self.moving + self.idle:
            if device.ws is not None:
                await device.ws.close()
                if device.reader is not None:
                    await device.reader
                device.ws = device.reader = None

    # Load.

    def move(self, device):
        """The device's next report: one neighbour gone, another heard instead, the rest refreshed."""
        rng = device.rng
        gone = []
        if len(device.neighbours) >= self.args.neighbours:
            gone.append(device.neighbours.pop(rng.randrange(len(device.neighbours))))
        added = []
        while len(device.neighbours) < self.args.neighbours:
            other = self.moving[rng.randrange(len(self.moving))]
            if other is device or other.index in device.neighbours or other.index in gone or other.token is None:
                continue
            device.neighbours.append(other.index)
            added.append(other.index)
        now = int(time.time() * 1000)
        seen = [{"token": self.moving[n].token, "medium": "ble", "rssi": -60 - rng.randrange(30),
                 "distance": round(rng.uniform(0.5, 10.0), 2), "seenAtMs": now} for n in device.neighbours]
        return added, {"seen": seen, "gone": [{"token": self.moving[n].token, "medium": "ble"} for n in gone]}

    async def report(self, device, latencies):
        added, body = self.move(device)
        start = time.perf_counter()
        if self.measuring and latencies is not None:
            for index in added:
                device.pending[index] = start
        async with self.requests.post(device.home + "/v1/devices/%s/sightings" % device.id, headers=device.auth,
                                      json=body) as answer:
            await answer.read()
            return answer.status, start

    async def health(self, device, latencies):
        start = time.perf_counter()
        async with self.requests.get((self.floor_url or self.url()) + "/v1/health") as answer:
            await answer.read()
            return answer.status, start

    async def one(self, kind, device, tally, latencies):
        device.busy = True
        try:
            status, start = await (self.report if kind == "sightings" else self.health)(device, latencies)
            if self.measuring:
                tally["%d" % status] += 1
                if latencies is not None:
                    latencies.append((time.perf_counter() - start) * 1000)
        except Exception as error:
            if self.measuring:
                tally[type(error).__name__] += 1
        finally:
            device.busy = False

    async def run(self, command):
        kind = command["kind"]
        devices = [d for d in self.moving if d.token and d.ws is not None and d.closed is None]
        if not devices:
            return {"error": "no device with an open stream"}
        tally = collections.Counter()
        self.floor_url = command.get("url")
        latencies = [] if "rate" in command else None
        self.found_latencies = []
        for device in devices:
            device.pending.clear()
        stop = asyncio.Event()

        if "rate" in command:
            load = asyncio.ensure_future(self.open_loop(kind, devices, command["rate"], tally, latencies, stop))
        else:
            load = asyncio.ensure_future(self.closed_loop(kind, devices, command["concurrency"], tally, stop))
        try:
            await asyncio.sleep(command["warmup"])  # the warm-up's length, not a wait for anything
            self.measuring = True
            emit(json.dumps({"measuring": command["id"]}))
            before = self.stream_events()
            start = time.monotonic()
            await asyncio.sleep(command["seconds"])  # the measured window's length
            seconds = time.monotonic() - start
            self.measuring = False
            events = self.stream_events() - before
        finally:
            stop.set()
            await load
        result = {"requests": tally.get("200", 0), "outcomes": dict(tally), "seconds": round(seconds, 3),
                  "events": dict(events)}
        if latencies is not None:
            result["latencies"] = [round(v, 3) for v in latencies]
            result["found"] = [round(v, 3) for v in self.found_latencies]
            result["unanswered"] = sum(len(d.pending) for d in devices)
        return result

    def stream_events(self):
        """The streams' events so far, by kind (found, lost, closed …)."""
        return collections.Counter({k[len("stream "):]: v for k, v in self.counts.items() if k.startswith("stream ")})

    async def closed_loop(self, kind, devices, concurrency, tally, stop):
        """`concurrency` requests in flight, each of a device of its own (a device's reports go in order)."""
        async def lane(mine):
            position = 0
            while not stop.is_set():
                await self.one(kind, mine[position % len(mine)], tally, None)
                position += 1

        lanes = [devices[i::concurrency] for i in range(concurrency) if devices[i::concurrency]]
        await asyncio.gather(*(lane(mine) for mine in lanes))

    async def open_loop(self, kind, devices, rate, tally, latencies, stop):
        """Requests sent on a schedule of `rate` a second, whatever the answers do; a device whose last
        report is still out is passed over (its reports go in order), and a send with no device free is
        counted as skipped."""
        tasks = set()
        start = time.perf_counter()
        sent = 0
        position = 0
        while not stop.is_set():
            due = int((time.perf_counter() - start) * rate) - sent
            for _ in range(due):
                for _ in range(len(devices)):
                    device = devices[position % len(devices)]
                    position += 1
                    if not device.busy:
                        break
                else:
                    tally["skipped"] += 1
                    continue
                device.busy = True
                task = asyncio.ensure_future(self.one(kind, device, tally, latencies))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            sent += max(due, 0)
            # The schedule's tick: sends are batched per 2 ms at most.
            try:
                await asyncio.wait_for(stop.wait(), 0.002)
            except asyncio.TimeoutError:
                pass
        if tasks:
            await asyncio.wait(tasks, timeout=30)

    # Upstream.

    async def open_channel(self, device, outcomes):
        ws = await self.connect(device, "channel", outcomes)
        if ws is None:
            return
        device.channel = ws
        device.channel_reader = asyncio.ensure_future(self.read_channel(device, ws))
        outcomes["opened"] += 1

    async def channels(self, command):
        start = time.monotonic()
        outcomes = collections.Counter()
        pending = iter([d for d in self.moving[:command["count"]] if d.id and d.channel is None])

        async def worker():
            for device in pending:
                await self.open_channel(device, outcomes)

        try:
            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(self.args.setup_concurrency))),
                                   command.get("within", 120))
        except asyncio.TimeoutError:
            outcomes["timed out"] += 1
        return {"outcomes": dict(outcomes), "open": len(self.open_channels()),
                "seconds": round(time.monotonic() - start, 2)}

    def open_channels(self):
        return [d for d in self.moving if d.channel is not None and not d.channel.closed]

    async def close_channels(self):
        for device in self.moving:
            if device.channel is not None:
                await device.channel.close()
                if device.channel_reader is not None:
                    await device.channel_reader
                device.channel = device.channel_reader = None
                self.upstream.given_up(device)

    async def send_upstream(self, device):
        """The device's next message, unless the run is stopping."""
        upstream = self.upstream
        if not upstream.sending or device.channel is None or device.channel.closed:
            return
        device.upstream_sequence += 1
        message_id = "u%d-%d-%d" % (self.args.process, device.index, device.upstream_sequence)
        frame = json.dumps({"op": "send", "message": {
            "app": "bench", "messageId": message_id, "to": self.args.to, "data": {"n": str(device.upstream_sequence)},
            "expiresAtMs": int(time.time() * 1000) + 600_000}})
        device.upstream_out[message_id] = time.perf_counter()
        upstream.out += 1
        await device.channel.send_str(frame)

    async def read_channel(self, device, ws):
        """The channel's events until it ends: each `sent` or `failed` settles a message, whose device sends the next."""
        aiohttp = self.aiohttp
        upstream = self.upstream
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                event = json.loads(message.data)
                kind = event.get("event")
                if kind == "sent":
                    settled = [ref.get("messageId") for ref in event.get("messages", [])]
                elif kind == "failed":
                    failure = event.get("failure", {})
                    upstream.outcomes["failed " + str(failure.get("error"))] += 1
                    settled = [failure.get("messageId")]
                else:
                    continue
                now = time.perf_counter()
                for message_id in settled:
                    sent = device.upstream_out.pop(message_id, None)
                    if sent is None:
                        upstream.outcomes["%s for no message out" % kind] += 1
                        continue
                    upstream.settled(kind == "sent", (now - sent) * 1000)
                    await self.send_upstream(device)
        except Exception as error:
            upstream.outcomes["channel error %s" % type(error).__name__] += 1
        if ws.close_code is not None and ws.close_code != 1000:
            upstream.outcomes["channel closed %s" % ws.close_code] += 1
        upstream.given_up(device)

    async def upstream_start(self, command):
        devices = self.open_channels()
        if not devices:
            return {"error": "no device with an open channel"}
        upstream = self.upstream
        upstream.begin(target=len(devices) * command["in_flight"])
        start = time.monotonic()
        for _ in range(command["in_flight"]):
            for device in devices:
                await self.send_upstream(device)
        warmed = True
        try:
            await asyncio.wait_for(upstream.warmed.wait(), command["within"])
        except asyncio.TimeoutError:
            warmed = False
        rest = command["warmup"] - (time.monotonic() - start)
        if rest > 0:
            await asyncio.sleep(rest)  # the warm-up's shortest length, not a wait for anything
        return {"devices": len(devices), "warmed": warmed, "seconds": round(time.monotonic() - start, 2),
                "settled": upstream.done}

    async def upstream_window(self, command):
        upstream = self.upstream
        emit(json.dumps({"measuring": command["id"]}))
        before = upstream.outcomes.copy()
        upstream.latencies = []
        upstream.measuring = True
        start = time.monotonic()
        await asyncio.sleep(command["seconds"])  # the measured window's length
        seconds = time.monotonic() - start
        upstream.measuring = False
        outcomes = upstream.outcomes - before
        outcomes["200"] = len(upstream.latencies)
        return {"requests": len(upstream.latencies), "outcomes": dict(outcomes), "seconds": round(seconds, 3),
                "latencies": [round(v, 3) for v in upstream.latencies]}

    async def upstream_stop(self, command):
        upstream = self.upstream
        upstream.stop()
        start = time.monotonic()
        try:
            await asyncio.wait_for(upstream.drained.wait(), command["within"])
        except asyncio.TimeoutError:
            pass
        return {"left": upstream.out, "seconds": round(time.monotonic() - start, 2), "outcomes": dict(upstream.outcomes)}

    # The command loop.

    async def serve(self):
        await self.start()
        try:
            await command_loop(self.handle)
        finally:
            await self.stop()

    async def handle(self, action, command):
        """The result of one command from the benchmark."""
        if action == "setup":
            result = await self.setup(command)
        elif action == "open":
            result = await self.open(command)
        elif action == "close":
            await self.close_streams()
            result = {"open": self.open_count()}
        elif action == "held":
            closed = collections.Counter(str(d.closed) for d in self.moving + self.idle
                                         if d.ws is not None and d.closed is not None)
            by_url = collections.Counter(d.stream_url for d in self.moving + self.idle
                                         if d.ws is not None and d.closed is None)
            result = {"open": self.open_count(), "closed": dict(closed), "by_url": dict(by_url)}
        elif action == "urls":
            self.urls = command["urls"]
            lanes = asyncio.Semaphore(64)

            async def rehome(device):
                async with lanes:
                    await self.find_home(device, self.url())
            await asyncio.gather(*(rehome(device) for device in self.moving + self.idle if device.id is not None))
            result = {}
        elif action == "run":
            result = await self.run(command)
        elif action == "channels":
            result = await self.channels(command)
        elif action == "close-channels":
            await self.close_channels()
            result = {"open": len(self.open_channels())}
        elif action == "upstream-start":
            result = await self.upstream_start(command)
        elif action == "upstream-window":
            result = await self.upstream_window(command)
        elif action == "upstream-stop":
            result = await self.upstream_stop(command)
        else:
            result = {"error": "unknown command %s" % action}
        return result


async def command_loop(handle):
    """Reads the benchmark's commands, one JSON object a line on standard
    input, until `quit` or its end; answers each with `handle(action,
    command)`'s result as `{"done": ID, "result": ...}`."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    emit(json.dumps({"ready": True}))
    while True:
        line = await reader.readline()
        if not line:
            return
        command = json.loads(line)
        if command["do"] == "quit":
            emit('{"done": %d, "result": {}}' % command["id"])
            return
        result = await handle(command["do"], command)
        emit('{"done": %d, "result": %s}' % (command["id"], json.dumps(result, sort_keys=True)))


# The application server: XMPP as nearby-server's connection server speaks it, and no more.

GCM = "google:mobile:data"
STREAM_HEADER = ("<?xml version='1.0'?><stream:stream to='%s' version='1.0' xmlns='jabber:client' "
                 "xmlns:stream='http://etherx.jabber.org/streams'>")
IQ_ID = re.compile(rb"""\bid=['"]([^'"]*)['"]""")


class Tally:
    """What the application server's sessions received, together: a message given to two sessions is a
    double delivery as much as one given twice to one."""

    def __init__(self):
        self.acked = 0
        self.payloads = collections.Counter()
        # The first few nacks, as they came.
        self.nacks = []
        # Every upstream message (device, id) → when it came; the first few that came again.
        self.upstream = {}
        self.again = []


class AppServer:
    """One CCS session that acks every upstream message as it comes. Stanzas are cut from the stream by their
    end tags (the server writes `<message …>…</message>` and `<iq …/>` or `<iq …>…</iq>`) and a `<gcm>`
    payload's JSON read as it is: no XML tree, no stanza objects."""

    def __init__(self, args, tally, resource):
        self.args = args
        self.tally = tally
        self.resource = resource
        self.reader = None
        self.writer = None
        self.buffer = b""
        # Dry-run message id → the future its ack or nack settles.
        self.waiting = {}
        self.closed = asyncio.Event()

    def write(self, text):
        self.writer.write(text.encode())

    def send_gcm(self, payload):
        text = json.dumps(payload, separators=(",", ":"))
        if "&" in text or "<" in text or ">" in text:
            text = xml_escape(text)
        self.write("<message id=''><gcm xmlns='%s'>%s</gcm></message>" % (GCM, text))

    async def until(self, *markers):
        """Reads until one of `markers` is in the buffer; returns the buffer up to the end of the element it
        begins (its first '>' after it), and keeps the rest."""
        while True:
            for marker in markers:
                at = self.buffer.find(marker)
                if at >= 0:
                    end = self.buffer.find(b">", at + len(marker) - 1)
                    if end >= 0:
                        head, self.buffer = self.buffer[:end + 1], self.buffer[end + 1:]
                        return head
            chunk = await self.reader.read(65536)
            if not chunk:
                raise RuntimeError("the server closed the stream during negotiation: %r" % self.buffer[-300:])
            self.buffer += chunk

    async def connect(self):
        args = self.args
        context = ssl.create_default_context(cafile=args.ca)
        self.reader, self.writer = await asyncio.open_connection(args.host, args.port, ssl=context,
                                                                 server_hostname=args.domain)
        self.write(STREAM_HEADER % args.domain)
        await self.until(b"</stream:features")
        credentials = base64.b64encode(b"\0" + args.project.encode() + b"\0" + args.key.encode()).decode()
        self.write("<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>%s</auth>" % credentials)
        answer = await self.until(b"<success", b"</failure")
        if b"<success" not in answer:
            raise RuntimeError("SASL failed: %r" % answer)
        self.write(STREAM_HEADER % args.domain)
        await self.until(b"</stream:features")
        self.write("<iq type='set' id='bind-1'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'>"
                   "<resource>%s</resource></bind></iq>" % self.resource)
        await self.until(b"</iq")

    async def read(self):
        """Every stanza until the stream ends."""
        try:
            while True:
                chunk = await self.reader.read(262144)
                if not chunk:
                    return
                self.buffer += chunk
                self.stanzas()
                await self.writer.drain()
        finally:
            self.closed.set()
            for waiter in self.waiting.values():
                if not waiter.done():
                    waiter.set_exception(RuntimeError("the stream ended"))

    def stanzas(self):
        buffer = self.buffer
        position = 0
        while True:
            start = buffer.find(b"<", position)
            if start < 0:
                position = len(buffer)
                break
            if buffer.startswith(b"<message", start):
                end = buffer.find(b"</message>", start)
                if end < 0:
                    position = start
                    break
                self.message(buffer[start:end])
                position = end + len(b"</message>")
            elif buffer.startswith(b"<iq", start):
                head = buffer.find(b">", start)
                if head < 0:
                    position = start
                    break
                if buffer[head - 1:head] == b"/":
                    end = head + 1
                else:
                    close = buffer.find(b"</iq>", head)
                    if close < 0:
                        position = start
                        break
                    end = close + len(b"</iq>")
                self.iq(buffer[start:end])
                position = end
            elif buffer.startswith(b"</stream:stream", start) or buffer.startswith(b"<stream:error", start):
                self.tally.payloads["stream ended"] += 1
                position = len(buffer)
                self.writer.close()
                break
            else:
                # Anything else is skipped up to its own end.
                end = buffer.find(b">", start)
                if end < 0:
                    position = start
                    break
                position = end + 1
        self.buffer = buffer[position:]

    def iq(self, stanza):
        # The server's ping (urn:xmpp:ping): answered, as anything from the client would.
        if b"type='get'" in stanza or b'type="get"' in stanza:
            match = IQ_ID.search(stanza)
            self.write("<iq type='result' id='%s' to='%s'/>" % (match.group(1).decode() if match else "",
                                                                self.args.domain))

    def message(self, stanza):
        opening = stanza.find(b"<gcm")
        if opening < 0:
            return
        start = stanza.find(b">", opening) + 1
        end = stanza.find(b"</gcm>", start)
        text = stanza[start:end].decode()
        if "&" in text:
            text = xml_unescape(text, {"&#13;": "\r", "&quot;": '"', "&apos;": "'"})
        payload = json.loads(text)
        kind = payload.get("message_type")
        if kind is None:
            # An upstream message: acked at once (again if it comes again: each delivery wants its ack).
            tally = self.tally
            key = (payload["from"], payload["message_id"])
            if key in tally.upstream:
                tally.payloads["upstream again"] += 1
                if len(tally.again) < 5:
                    tally.again.append({"from": key[0], "message_id": key[1],
                                        "after_ms": round((time.perf_counter() - tally.upstream[key]) * 1000, 1)})
            tally.upstream[key] = time.perf_counter()
            self.send_gcm({"to": payload["from"], "message_id": payload["message_id"], "message_type": "ack"})
            tally.acked += 1
            return
        self.tally.payloads[kind if kind != "nack" else "nack %s" % payload.get("error")] += 1
        if kind == "nack" and len(self.tally.nacks) < 5:
            self.tally.nacks.append(payload)
        if kind in ("ack", "nack"):
            waiter = self.waiting.pop(payload.get("message_id"), None)
            if waiter is not None and not waiter.done():
                if kind == "ack":
                    waiter.set_result(None)
                else:
                    waiter.set_exception(RuntimeError("nack: %s" % json.dumps(payload)))

    async def dry_run(self, to, message_id):
        waiter = asyncio.get_running_loop().create_future()
        self.waiting[message_id] = waiter
        self.send_gcm({"to": to, "message_id": message_id, "data": {"n": message_id}, "dry_run": True})
        await waiter

    async def measure_dry_runs(self, command):
        to = command["to"]
        for index in range(50):
            await self.dry_run(to, "warm-%d" % index)
        rtts = []
        for index in range(command["one_at_a_time"]):
            start = time.perf_counter()
            await self.dry_run(to, "one-%d" % index)
            rtts.append(round((time.perf_counter() - start) * 1000, 3))
        window = asyncio.Semaphore(command["window"])

        async def one(index):
            async with window:
                await self.dry_run(to, "many-%d" % index)

        start = time.perf_counter()
        await asyncio.gather(*(one(index) for index in range(command["count"])))
        seconds = time.perf_counter() - start
        return {"rtt_ms": rtts, "rate": round(command["count"] / seconds, 1)}

    async def end(self):
        if not self.closed.is_set():
            self.write("</stream:stream>")
            await self.writer.drain()
            try:
                await asyncio.wait_for(self.closed.wait(), 5)
            except asyncio.TimeoutError:
                pass
        self.writer.close()


async def serve_app(args):
    """The application server's sessions, and the benchmark's commands to them (dry runs go through the
    first)."""
    tally = Tally()
    sessions = [AppServer(args, tally, "bench-%d" % index) for index in range(args.sessions)]
    for session in sessions:
        await session.connect()
    reading = [asyncio.ensure_future(session.read()) for session in sessions]

    async def handle(action, command):
        """The result of one command from the benchmark."""
        if any(session.closed.is_set() for session in sessions):
            result = {"error": "an XMPP stream ended: %s" % dict(tally.payloads)}
        elif action == "dry-run":
            result = await asyncio.wait_for(sessions[0].measure_dry_runs(command), command.get("within", 120))
        elif action == "acked":
            result = {"acked": tally.acked, "payloads": dict(tally.payloads), "nacks": tally.nacks, "again": tally.again}
        else:
            result = {"error": "unknown command %s" % action}
        return result

    try:
        await command_loop(handle)
    finally:
        await asyncio.gather(*(session.end() for session in sessions))
        for task in reading:
            task.cancel()


def sqlite_insert(args):
    import sqlite3
    path = args.path
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=%s" % args.synchronous)
    synchronous = db.execute("PRAGMA synchronous").fetchone()[0]
    db.execute("CREATE TABLE floor_insert (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    count = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while time.perf_counter() < deadline:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO floor_insert (v) VALUES (1)")
        db.execute("COMMIT")
        count += 1
    rate = count / (time.perf_counter() - start)
    db.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    print(json.dumps({"inserts_per_s": round(rate, 1), "synchronous": synchronous}), flush=True)


# PostgreSQL's wire protocol (version 3), the little pg-notify needs.

class PGSession:
    def __init__(self, socket_dir, user, database, port):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect("%s/.s.PGSQL.%d" % (socket_dir, port))
        self.buffer = b""
        parameters = b"user\0" + user.encode() + b"\0database\0" + database.encode() + b"\0\0"
        self.sock.sendall(struct.pack("!ii", 8 + len(parameters), 196608) + parameters)
        self.until(b"Z")

    def message(self):
        while True:
            if len(self.buffer) >= 5:
                kind, length = self.buffer[:1], struct.unpack("!i", self.buffer[1:5])[0]
                if len(self.buffer) >= 1 + length:
                    body, self.buffer = self.buffer[5:1 + length], self.buffer[1 + length:]
                    if kind == b"E":
                        raise RuntimeError("PostgreSQL: %r" % body)
                    if kind == b"R" and struct.unpack("!i", body[:4])[0] != 0:
                        raise RuntimeError("PostgreSQL asks for a password: the cluster should trust its socket")
                    return kind, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("PostgreSQL closed the connection")
            self.buffer += chunk

    def until(self, wanted):
        while True:
            kind, body = self.message()
            if kind == wanted:
                return body

    def query(self, text):
        encoded = text.encode() + b"\0"
        self.sock.sendall(b"Q" + struct.pack("!i", 4 + len(encoded)) + encoded)


def pg_notify(args):
    listener = PGSession(args.socket_dir, args.user, args.database, args.port)
    sender = PGSession(args.socket_dir, args.user, args.database, args.port)
    listener.query("LISTEN bench_floor")
    listener.until(b"Z")
    rtts = []
    for index in range(args.warmup + args.count):
        start = time.perf_counter()
        sender.query("NOTIFY bench_floor, '%d'" % index)
        listener.until(b"A")
        if index >= args.warmup:
            rtts.append(round((time.perf_counter() - start) * 1000, 4))
        sender.until(b"Z")
    print(json.dumps({"rtt_ms": rtts}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker")
    worker.add_argument("--urls", type=lambda text: text.split(","), required=True, help="the servers, comma-separated")
    worker.add_argument("--key", required=True, help="the project's API key")
    worker.add_argument("--process", type=int, default=0, help="this process's number (its source addresses, its content)")
    worker.add_argument("--devices", type=int, default=500, help="moving devices")
    worker.add_argument("--idle", type=int, default=0, help="devices that only hold a stream")
    worker.add_argument("--neighbours", type=int, default=4, help="tokens each moving device hears at once")
    worker.add_argument("--per-address", type=int, default=100,
                        help="devices per source address (each with its stream, and its channel when asked)")
    worker.add_argument("--to", default="", help="the application server upstream messages go to (PROJECT@DOMAIN)")
    worker.add_argument("--setup-concurrency", type=int, default=16)
    worker.add_argument("--seed", type=int, default=1)
    app = commands.add_parser("appserver")
    app.add_argument("--host", default="127.0.0.1")
    app.add_argument("--port", type=int, required=True)
    app.add_argument("--domain", required=True, help="the XMPP domain, which the certificate names")
    app.add_argument("--project", required=True, help="the project (the SASL user name)")
    app.add_argument("--key", required=True, help="the project's server key")
    app.add_argument("--ca", required=True, help="the endpoint's certificate, trusted as a CA")
    app.add_argument("--sessions", type=int, default=1, help="XMPP sessions, each acking what it is given")
    insert = commands.add_parser("sqlite-insert")
    insert.add_argument("--path", required=True, help="a new file, removed afterwards")
    insert.add_argument("--seconds", type=float, default=5)
    insert.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL")
    notify = commands.add_parser("pg-notify")
    notify.add_argument("--socket-dir", required=True)
    notify.add_argument("--port", type=int, default=5432)
    notify.add_argument("--user", required=True)
    notify.add_argument("--database", required=True)
    notify.add_argument("--count", type=int, default=1000)
    notify.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    if args.command == "pg-notify":
        pg_notify(args)
        return
    if args.command == "sqlite-insert":
        sqlite_insert(args)
        return
    if args.command == "appserver":
        asyncio.run(serve_app(args))
        return
    # Every stream is a descriptor: as many as the hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(Worker(args).serve())


if __name__ == "__main__":
    main()
