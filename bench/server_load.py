"""The Python helpers of `nearby-bench server` (its devices are nearby-load,
bench/nearby-load, on SwiftNIO): the application server of the upstream
figure, and small clients for the databases' own floors.

  server_load.py appserver --port PORT --domain DOMAIN --project NAME --key SERVER_KEY --ca PEM
  server_load.py pg-notify --socket-dir DIR --user USER --database DB [--count N]
  server_load.py sqlite-insert --path FILE [--seconds S]

appserver: the application server of the upstream figure, --sessions XMPP
sessions (each TLS from the first byte, SASL PLAIN with the project's server
key, a bound resource of its own: CCS holds at most 100 messages unacked on
one connection, and application servers open several for more) on asyncio
alone, doing as little as it can per message: no
XML tree, no stanza objects (slixmpp, bench/ccs_appserver.py, builds both;
the benchmark measures its dry runs beside these). It acks every upstream
message as it comes (again if it comes again, counting that), answers the
server's pings, and takes commands on standard input, one JSON object a
line, each answered with `{"done": ID, "result": {...}}`:

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
"""
import argparse
import asyncio
import base64
import collections
import json
import os
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
    asyncio.run(serve_app(args))


if __name__ == "__main__":
    main()
