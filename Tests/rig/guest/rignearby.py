"""The project's programs in the rig: nearby-server, a nearbyd per controller
on a bus of its own, and a D-Bus client of org.nearbyd (dbus-next) that
publishes, subscribes and records what it is told.

Every process started here is stopped by World.stop(); the harness also kills
the case's process group when the case ends.
"""

import asyncio
import json
import os
import subprocess
import time

from dbus_next import Message, MessageType, Variant
from dbus_next.aio import MessageBus

from rigbluez import env, log, until


class Process:
    """A child whose output goes to a log file that the harness brings back."""

    def __init__(self, name, argv, log_dir):
        self.name = name
        self.path = os.path.join(log_dir, name + ".log")
        self.file = open(self.path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.file, stderr=subprocess.STDOUT)

    def text(self):
        with open(self.path) as f:
            return f.read()

    async def wait_for(self, needle, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.text().splitlines():
                if needle in line:
                    return line
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) before printing {needle!r}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.name} did not print {needle!r} within {timeout}s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.file.close()


class Manager:
    """One app's manager on one nearbyd, with every signal it was sent."""

    def __init__(self, bus, path):
        self.bus = bus
        self.path = path
        self.events = []       # (monotonic time, kind, content)
        self.errors = {}       # error property -> bool, as last changed
        self._changed = asyncio.Event()

    def on_signal(self, msg):
        if not msg.path or not msg.path.startswith(self.path):
            return
        now = time.monotonic()
        self._changed.set()
        if msg.member in ("MessageFound", "MessageLost"):
            kind = "found" if msg.member == "MessageFound" else "lost"
            self.events.append((now, kind, bytes(msg.body[0]).decode()))
        elif msg.member == "PropertiesChanged" and msg.path == self.path:
            for name, value in msg.body[1].items():
                if name.endswith("Error"):
                    self.errors[name] = value.value
                    self.events.append((now, name, value.value))

    async def call(self, path, interface, member, signature="", body=None):
        reply = await self.bus.call(Message(destination="org.nearbyd", path=path, interface=interface, member=member,
                                            signature=signature, body=body or []))
        if reply.message_type == MessageType.ERROR:
            raise RuntimeError(f"{member}: {reply.error_name}: {reply.body}")
        return reply.body

    async def publish(self, text, mediums=None, mode=None):
        (path,) = await self.call(self.path, "org.nearbyd.Manager1", "Publish", "aysa{sv}",
                                  [text.encode(), "chat", strategy(mediums, mode)])
        return path

    async def subscribe(self, mediums=None, mode=None):
        (path,) = await self.call(self.path, "org.nearbyd.Manager1", "Subscribe", "a{sv}",
                                  [{"Type": Variant("s", "chat"), **strategy(mediums, mode)}])
        return path

    async def end(self, path, interface):
        await self.call(path, interface, "Unpublish" if "Publication" in interface else "Unsubscribe")

    async def error(self, name):
        (value,) = await self.call(self.path, "org.freedesktop.DBus.Properties", "Get", "ss",
                                   ["org.nearbyd.Manager1", name])
        return value.value

    async def wait(self, kind, content, after=0.0, timeout=60):
        """The time of the first event `kind` with `content` later than `after`,
        looked for again at each signal."""
        def first():
            return next((at for at, k, c in self.events if at > after and k == kind and c == content), None)

        return await until(self._changed, first, timeout, lambda: f"{kind} {content!r}; events: {self.events[-10:]}")


def strategy(mediums=None, mode=None):
    """Publish/Subscribe options with a Strategy of these mediums and mode
    (None: the default)."""
    keys = {}
    if mediums is not None:
        keys["Mediums"] = Variant("as", mediums)
    if mode is not None:
        keys["Mode"] = Variant("s", mode)
    return {"Strategy": Variant("a{sv}", keys)} if keys else {}


class World:
    """nearby-server and a nearbyd per controller, each on a bus of its own."""

    def __init__(self):
        self.bin = env("RIG_BIN")
        self.scratch = env("RIG_SCRATCH")
        self.logs = env("RIG_LOG_DIR")
        self.case = env("RIG_CASE")
        self.processes = []
        self.buses = []
        self.daemon_buses = {}

    def start(self, name, argv):
        process = Process(f"{self.case}.{name}", argv, self.logs)
        self.processes.append(process)
        return process

    async def start_server(self):
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        database = os.path.join(self.scratch, "server.sqlite")
        server = self.start("server", [f"{self.bin}/nearby-server", "serve", "--listen", "127.0.0.1:0",
                                       "--database", database])
        line = await server.wait_for("listening on http://")
        self.server_url = line[line.index("http://"):].strip()
        self.database = database
        self.api_key = self.create_project("rig")

    def create_project(self, name):
        """A new project on the server; returns its API key."""
        created = subprocess.run([f"{self.bin}/nearby-server", "project", "create", name, "--database", self.database,
                                  "--json"], check=True, capture_output=True, text=True)
        return json.loads(created.stdout)["apiKey"]

    async def start_daemon(self, name, ble, extra=""):
        """A nearbyd on a private bus of its own; `ble` is its [ble] section,
        `extra` more sections."""
        address = f"unix:path={self.scratch}/bus-{name}"
        bus_daemon = self.start(f"bus-{name}", ["dbus-daemon", "--session", f"--address={address}", "--nofork",
                                                "--print-address=1"])
        await bus_daemon.wait_for("unix:")
        config = os.path.join(self.scratch, f"{name}.conf")
        with open(config, "w") as f:
            f.write(f"[ble]\n{ble}\n[discovery]\nlost-timeout = 2\nrefresh-interval = 1\n"
                    f"[permissions]\ndefault-policy = \"grant\"\n[daemon]\nlogind-bus = \"none\"\n{extra}\n")
        daemon = self.start(f"nearbyd-{name}", [f"{self.bin}/nearbyd", "--bus", address, "--config", config,
                                                "--server", self.server_url, "--state-dir",
                                                os.path.join(self.scratch, f"state-{name}"), "--log-level", "debug"])
        await daemon.wait_for("nearbyd: ready")
        bus = await MessageBus(bus_address=address).connect()
        self.buses.append(bus)
        self.daemon_buses[name] = bus
        await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                               interface="org.freedesktop.DBus", member="AddMatch", signature="s",
                               body=["type='signal',sender='org.nearbyd'"]))
        manager = await self.manager(name, self.api_key)
        log(f"nearbyd {name} ready ({ble.splitlines()[0]}), manager {manager.path}")
        return manager

    async def manager(self, name, api_key):
        """A new manager of `api_key` on daemon `name` (Release() it when done:
        a client may hold 16)."""
        bus = self.daemon_buses[name]
        reply = await bus.call(Message(destination="org.nearbyd", path="/org/nearbyd", interface="org.nearbyd.Nearby1",
                                       member="CreateManager", signature="sa{sv}", body=[api_key, {}]))
        if reply.message_type == MessageType.ERROR:
            raise RuntimeError(f"CreateManager: {reply.error_name}: {reply.body}")
        manager = Manager(bus, reply.body[0])
        bus.add_message_handler(manager.on_signal)
        return manager

    def stop(self):
        for bus in self.buses:
            bus.disconnect()
        for process in reversed(self.processes):
            process.stop()
