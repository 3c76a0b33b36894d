"""A connection flood against an XMPP endpoint with TLS from the first byte
(nearby-server's [xmpp] listen), as an attacker with no credentials makes it:

  --idle N     TCP connections that never send a byte
  --hello N    connections that send a real TLS ClientHello one byte at a time
  --header N   connections that finish TLS, then send a stream header one
               byte at a time

spread over the source addresses --sources FIRST-LAST (loopback addresses
such as 127.0.1.1-127.0.1.100; Linux routes all of 127/8 to lo). A
connection the server closes is opened again, at most --refill-rate per
second in all, so the flood stays as large as the server lets it be.

It prints, flushed, for the test to wait on:

  flooding IDLE HELLO HEADER   every connection was attempted once
  held N closed M              every second: connections open now, and how
                               many the server closed (or refused) so far

It raises its own descriptor limit (RLIMIT_NOFILE) to hold the flood, and
exits 2 when the hard limit is too low for it.
"""

import argparse
import asyncio
import ipaddress
import itertools
import resource
import ssl
import sys


def say(*words):
    print(*words, flush=True)


def addresses(spec):
    first, _, last = spec.partition("-")
    first = ipaddress.IPv4Address(first)
    last = ipaddress.IPv4Address(last or str(first))
    return [str(ipaddress.IPv4Address(n)) for n in range(int(first), int(last) + 1)]


def client_hello():
    """The bytes a TLS client sends first, from Python's own TLS stack."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    connection = context.wrap_bio(ssl.MemoryBIO(), outgoing)
    try:
        connection.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


class Flood:
    def __init__(self, args):
        self.args = args
        self.sources = itertools.cycle(addresses(args.sources))
        self.hello = client_hello()
        self.header = (f"<?xml version='1.0'?><stream:stream to='{args.domain}' version='1.0' "
                       "xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams'>").encode()
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.tls.check_hostname = False
        self.tls.verify_mode = ssl.CERT_NONE
        self.held = 0
        self.closed = 0
        self.refill = asyncio.Queue()
        self.attempted = 0
        self.all_attempted = asyncio.Event()
        self.first_wave = 0
        # asyncio keeps only weak references to tasks: these are the strong ones.
        self.tasks = set()
        # Connections being opened at once: enough to outpace the server's
        # accepting, few enough not to overflow the listen backlog into timeouts.
        self.opening = asyncio.Semaphore(args.parallel)

    async def connection(self, kind):
        """One connection of `kind`, from its opening to the server's close."""
        writer = None
        try:
            async with self.opening:
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(
                        self.args.host, self.args.port, local_addr=(next(self.sources), 0),
                        ssl=self.tls if kind == "header" else None), timeout=30)
                finally:
                    self.attempted += 1
                    if self.attempted == self.first_wave:
                        self.all_attempted.set()
            self.held += 1
            try:
                await self.behave(kind, reader, writer)
            finally:
                self.held -= 1
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            pass
        finally:
            if writer is not None:
                writer.close()
        self.closed += 1
        self.refill.put_nowait(kind)

    async def behave(self, kind, reader, writer):
        """Dribbles what `kind` sends, one byte per --interval, until the
        server closes the connection (reads return nothing)."""
        data = {"idle": b"", "hello": self.hello, "header": self.header}[kind]
        eof = asyncio.ensure_future(self.until_closed(reader))  # Awaited below in every case.
        try:
            for byte in data:
                if eof.done():
                    return
                writer.write(bytes([byte]))
                await asyncio.wait([eof], timeout=self.args.interval)
            await eof
        finally:
            eof.cancel()
            await asyncio.gather(eof, return_exceptions=True)

    @staticmethod
    async def until_closed(reader):
        while await reader.read(4096):
            pass

    def start(self, kind):
        task = asyncio.ensure_future(self.connection(kind))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def refiller(self):
        """Opens again what the server closed, at most --refill-rate a second."""
        while True:
            kind = await self.refill.get()
            self.start(kind)
            await asyncio.sleep(1 / self.args.refill_rate)

    async def report(self):
        while True:
            say("held", self.held, "closed", self.closed)
            await asyncio.sleep(1)

    async def run(self):
        kinds = ["idle"] * self.args.idle + ["hello"] * self.args.hello + ["header"] * self.args.header
        self.first_wave = len(kinds)
        for kind in kinds:
            self.start(kind)
        await self.all_attempted.wait()
        say("flooding", self.args.idle, self.args.hello, self.args.header)
        await asyncio.gather(self.refiller(), self.report())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--domain", default="nearby.test", help="the stream header's 'to'")
    parser.add_argument("--sources", default="127.0.1.1-127.0.1.100")
    parser.add_argument("--idle", type=int, default=4000)
    parser.add_argument("--hello", type=int, default=500)
    parser.add_argument("--header", type=int, default=500)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between dribbled bytes")
    parser.add_argument("--refill-rate", type=float, default=200.0, help="closed connections opened again per second")
    parser.add_argument("--parallel", type=int, default=256, help="connections being opened at once")
    args = parser.parse_args()

    needed = args.idle + args.hello + args.header + 64
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        say(f"error: RLIMIT_NOFILE hard limit {hard} is below the {needed} descriptors the flood needs")
        sys.exit(2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    asyncio.run(Flood(args).run())


if __name__ == "__main__":
    main()
