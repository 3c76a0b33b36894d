"""Helpers for the rig's Python cases: a BlueZ client on the system bus.

The harness puts this directory on PYTHONPATH. Uses Debian's python3-dbus-next
(asyncio). Everything that waits takes a deadline: cases wait on conditions,
never on fixed sleeps.
"""

import asyncio
import os
import subprocess
import sys
import time

from dbus_next import BusType, Message, MessageType, Variant
from dbus_next.aio import MessageBus
from dbus_next.errors import DBusError
from dbus_next.service import PropertyAccess, ServiceInterface, dbus_property, method

BLUEZ = "org.bluez"
PROPS = "org.freedesktop.DBus.Properties"
OBJMGR = "org.freedesktop.DBus.ObjectManager"
ADAPTER = "org.bluez.Adapter1"
DEVICE = "org.bluez.Device1"
ADV = "org.bluez.LEAdvertisement1"
ADV_MANAGER = "org.bluez.LEAdvertisingManager1"
MONITOR_MANAGER = "org.bluez.AdvertisementMonitorManager1"


async def until(changed, condition, timeout, what):
    """condition()'s first truthy value, checked now and again each time the
    asyncio.Event `changed` is set (the waiter clears it); TimeoutError saying
    what it waited for (`what`: text, or a function giving it at the end) if
    `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"gave up after {timeout}s waiting for {what() if callable(what) else what}")
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), left)
        except asyncio.TimeoutError:
            pass


def log(*args):
    # Wall-clock time of day, as btmon -t prints it, to line up a case's log
    # with btmon's trace.
    now = time.time()
    print(time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}", *args, flush=True)


def plain(value):
    """D-Bus values as plain Python: variants unwrapped, byte arrays as bytes."""
    if isinstance(value, Variant):
        return plain(value.value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class Advertisement(ServiceInterface):
    """An org.bluez.LEAdvertisement1 with Type and ServiceData only (the shape
    nearbyd's token frame uses, doc/architecture.md, "BLE: what the backends
    rely on", LEAdvertisement1)."""

    def __init__(self, service_data, type_="broadcast"):
        super().__init__(ADV)
        self._type = type_
        self._service_data = dict(service_data)
        self.released = False

    @method()
    def Release(self):
        self.released = True

    @dbus_property(access=PropertyAccess.READ)
    def Type(self) -> "s":
        return self._type

    @dbus_property(access=PropertyAccess.READ)
    def ServiceData(self) -> "a{sv}":
        return {uuid: Variant("ay", bytes(data)) for uuid, data in self._service_data.items()}

    def set_service_data(self, service_data):
        """Change ServiceData and emit PropertiesChanged, as a token rotation
        without re-registering would."""
        self._service_data = dict(service_data)
        self.emit_properties_changed({"ServiceData": self.ServiceData})


class BlueZ:
    """A system-bus connection that mirrors bluetoothd's objects (from
    GetManagedObjects, then InterfacesAdded/Removed and PropertiesChanged), so
    a case can wait until some object has some property."""

    def __init__(self):
        self.bus = None
        self.objects = {}  # path -> {interface -> {property -> plain value}}
        self._changed = asyncio.Event()
        self.on_change = None  # optional callback(path, interface, changed)
        self._exported = set()
        self.tx_power_set = []  # (advertisement path, value) bluetoothd Set
        # Signals that arrive while GetManagedObjects is on its way, replayed
        # in order over its answer; None once the mirror is live.
        self._held = None

    async def connect(self):
        self.bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
        self.bus.add_message_handler(self._on_message)
        self.bus.add_message_handler(self._on_set_tx_power)
        self._held = []
        await self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                        "AddMatch", "s", [f"type='signal',sender='{BLUEZ}'"])
        managed = await self.call(BLUEZ, "/", OBJMGR, "GetManagedObjects")
        for path, ifaces in managed[0].items():
            self.objects[path] = plain(ifaces)
        # dbus-next runs signal handlers as messages are read but resumes this
        # coroutine later: a signal read right after the reply (newer than the
        # answer) would otherwise be applied first and then overwritten by the
        # answer. Replaying every held signal in order ends at the newest
        # state whichever side of the answer each came from.
        held, self._held = self._held, None
        for msg in held:
            self._on_message(msg)
        return self

    def _on_message(self, msg):
        if msg.message_type != MessageType.SIGNAL:
            return
        if self._held is not None:
            self._held.append(msg)
            return
        if msg.interface == OBJMGR and msg.member == "InterfacesAdded":
            path, ifaces = msg.body
            self.objects.setdefault(path, {}).update(plain(ifaces))
            for iface, props in ifaces.items():
                self._notify(path, iface, plain(props))
        elif msg.interface == OBJMGR and msg.member == "InterfacesRemoved":
            path, ifaces = msg.body
            for iface in ifaces:
                self.objects.get(path, {}).pop(iface, None)
            self._notify(path, None, {})
        elif msg.interface == PROPS and msg.member == "PropertiesChanged":
            iface, changed, invalidated = msg.body
            props = self.objects.setdefault(msg.path, {}).setdefault(iface, {})
            props.update(plain(changed))
            for name in invalidated:
                props.pop(name, None)
            self._notify(msg.path, iface, plain(changed))

    def _on_set_tx_power(self, msg):
        # On the extended advertising path bluetoothd writes the TX power it
        # chose back to the advertisement with Properties.Set("TxPower"), even
        # when the object has no such property (doc/architecture.md, "BLE: what
        # the backends rely on", LEAdvertisement1).
        # This rig client accepts it to record the values; nearbyd's object
        # answers with an error, which bluetoothd ignores.
        if (msg.message_type == MessageType.METHOD_CALL and msg.interface == PROPS
                and msg.member == "Set" and msg.path in self._exported
                and list(msg.body[:2]) == [ADV, "TxPower"]):
            self.tx_power_set.append((msg.path, plain(msg.body[2])))
            return Message.new_method_return(msg)
        return None

    def _notify(self, path, iface, changed):
        if self.on_change:
            self.on_change(path, iface, changed)
        self._changed.set()

    async def call(self, dest, path, interface, member, signature="", body=None):
        reply = await self.bus.call(Message(destination=dest, path=path, interface=interface,
                                            member=member, signature=signature, body=body or []))
        if reply.message_type == MessageType.ERROR:
            raise DBusError(reply.error_name, reply.body[0] if reply.body else "", reply)
        return reply.body

    async def get_all(self, path, interface):
        (props,) = await self.call(BLUEZ, path, PROPS, "GetAll", "s", [interface])
        return plain(props)

    async def set_prop(self, path, interface, name, variant):
        await self.call(BLUEZ, path, PROPS, "Set", "ssv", [interface, name, variant])

    async def wait_for(self, what, predicate, timeout):
        """Wait until predicate() returns something truthy, re-checking on every
        change from bluetoothd. Returns that value; raises TimeoutError saying
        what it waited for."""
        return await until(self._changed, predicate, timeout, what)

    def devices(self, adapter):
        """Device1 properties of the devices under /org/bluez/<adapter>."""
        prefix = f"/org/bluez/{adapter}/"
        return {p: i[DEVICE] for p, i in self.objects.items() if p.startswith(prefix) and DEVICE in i}

    def device_with_service_data(self, adapter, uuid, data):
        """(path, Device1 properties) of a device on adapter whose ServiceData
        holds exactly data under uuid, or None."""
        for path, props in self.devices(adapter).items():
            if bytes(props.get("ServiceData", {}).get(uuid, b"")) == bytes(data):
                return path, props
        return None

    async def start_le_discovery(self, adapter):
        """Discover as nearbyd's scanner does: LE only, every report (no UUID
        filter: it cannot see service data, doc/architecture.md, "BLE: what
        the backends rely on", Discovery filter)."""
        path = f"/org/bluez/{adapter}"
        await self.call(BLUEZ, path, ADAPTER, "SetDiscoveryFilter", "a{sv}",
                        [{"Transport": Variant("s", "le"), "DuplicateData": Variant("b", True)}])
        await self.call(BLUEZ, path, ADAPTER, "StartDiscovery")

    async def stop_discovery(self, adapter):
        await self.call(BLUEZ, f"/org/bluez/{adapter}", ADAPTER, "StopDiscovery")

    async def register_advertisement(self, adapter, obj_path, advertisement):
        """Export the advertisement (if not yet) and register it on adapter."""
        if obj_path not in self._exported:
            self.bus.export(obj_path, advertisement)
            self._exported.add(obj_path)
        await self.call(BLUEZ, f"/org/bluez/{adapter}", ADV_MANAGER, "RegisterAdvertisement",
                        "oa{sv}", [obj_path, {}])

    async def unregister_advertisement(self, adapter, obj_path):
        await self.call(BLUEZ, f"/org/bluez/{adapter}", ADV_MANAGER, "UnregisterAdvertisement",
                        "o", [obj_path])


class Btmon:
    """btmon writing its decoded trace of every controller (HCI and mgmt) to a
    file, for the findings a case reads off the air."""

    def __init__(self, path):
        self.path = path
        self.proc = None

    def start(self, timeout=20):
        self.file = open(self.path, "w")
        # Line-buffered (btmon's stdout to a file is block-buffered), and -t
        # for wall-clock times that line up with the case's log.
        self.proc = subprocess.Popen(["stdbuf", "-oL", "btmon", "-t"], stdout=self.file,
                                     stderr=subprocess.STDOUT)
        # Once the monitor socket is open, btmon lists the controllers.
        deadline = time.monotonic() + timeout
        while "hci1" not in open(self.path).read(4096):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"btmon did not start (see {self.path})")
            time.sleep(0.05)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.file.close()

    def text(self):
        with open(self.path, errors="replace") as f:
            return f.read()


def btmon_blocks(text):
    """btmon's trace as a list of (header line, [detail lines])."""
    blocks = []
    for line in text.splitlines():
        if line and not line[0].isspace():
            blocks.append((line, []))
        elif blocks:
            blocks[-1][1].append(line.strip())
    return blocks


def run(main):
    """Run an async case main(); exit 0 on success, 1 with the reason on an
    exception."""
    try:
        asyncio.run(main())
    except Exception as e:  # the reason goes to the case's log
        log(f"FAIL: {type(e).__name__}: {e}")
        import traceback
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)


def env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run this case through Tests/rig/run")
    return value
