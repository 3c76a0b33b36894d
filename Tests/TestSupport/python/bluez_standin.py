#!/usr/bin/python3
"""A small stand-in for bluetoothd, as org.bluez on a private bus.

It implements the part of BlueZ's D-Bus API that nearbyd uses, the way
bluetoothd 5.66 behaves (doc/architecture.md, "BLE: what the backends rely
on"): ObjectManager at /,
Adapter1 (Powered, SetDiscoveryFilter, StartDiscovery, StopDiscovery,
RemoveDevice), LEAdvertisingManager1 (which reads the advertisement's
properties back from the caller with Properties.GetAll and builds the
advertising data, refusing more than 31 bytes) and
AdvertisementMonitorManager1 (which reads the monitors through the caller's
ObjectManager and calls Activate). Clients that leave the bus lose their
advertisements, discovery sessions and monitors.

Tests drive it through org.nearbyd.test.BlueZ1 at /org/nearbyd/test (adapters
and devices appearing, changing and vanishing; refusals; Release) and read
what nearbyd did from standard output: one line per BlueZ call,
`call {json}`, written once the call is answered.
"""

import argparse
import asyncio
import json
import sys

from dbus_next import Message, MessageType, Variant
from dbus_next.aio import MessageBus
from dbus_next.errors import DBusError

CONTROL_PATH = "/org/nearbyd/test"
CONTROL = "org.nearbyd.test.BlueZ1"
ADAPTER = "org.bluez.Adapter1"
DEVICE = "org.bluez.Device1"
ADVERTISING = "org.bluez.LEAdvertisingManager1"
MONITORS = "org.bluez.AdvertisementMonitorManager1"
PROPERTIES = "org.freedesktop.DBus.Properties"
OBJECT_MANAGER = "org.freedesktop.DBus.ObjectManager"
MAX_ADVERTISEMENTS = 4
FILTER_KEYS = {"UUIDs": "as", "RSSI": "n", "Pathloss": "q", "Transport": "s",
               "DuplicateData": "b", "Discoverable": "b", "Pattern": "s"}


def plain(value):
    """A JSON-friendly copy of a D-Bus value."""
    if isinstance(value, Variant):
        return plain(value.value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def uuid_bytes(uuid):
    """A UUID string's 16 bytes in the little-endian order of advertising data."""
    return bytes.fromhex(uuid.replace("-", ""))[::-1]


class StandIn:
    def __init__(self, bus):
        self.bus = bus
        self.objects = {}          # path -> {interface: {name: Variant}}
        self.refusal = None        # error name every BlueZ call gets, if set
        self.filters = {}          # (adapter, sender) -> filter dict
        self.discovering = {}      # adapter -> set of senders
        self.advertisements = {}   # (sender, path) -> record
        self.monitors = {}         # (sender, root) -> record
        self.answered = {}         # member -> how many calls were answered ok

    # -- objects --------------------------------------------------------

    def emit(self, path, interface, member, signature, body):
        self.bus.send(Message.new_signal(path, interface, member, signature, body))

    def add_object(self, path, interfaces):
        self.objects[path] = interfaces
        self.emit("/", OBJECT_MANAGER, "InterfacesAdded", "oa{sa{sv}}", [path, interfaces])

    def remove_object(self, path):
        interfaces = self.objects.pop(path)
        self.emit("/", OBJECT_MANAGER, "InterfacesRemoved", "oas", [path, list(interfaces)])

    def set_properties(self, path, interface, changes):
        self.objects[path][interface].update(changes)
        self.emit(path, PROPERTIES, "PropertiesChanged", "sa{sv}as", [interface, changes, []])

    def adapter_path(self, name):
        path = "/org/bluez/" + name
        if ADAPTER not in self.objects.get(path, {}):
            raise DBusError("org.nearbyd.test.Error", "no adapter " + name)
        return path

    def powered(self, adapter):
        return self.objects[adapter][ADAPTER]["Powered"].value

    # -- the control interface -------------------------------------------

    def control(self, msg):
        args = msg.body
        member = msg.member
        if member == "AddAdapter":
            name, powered, monitors = args
            path = "/org/bluez/" + name
            number = int(name[3:])
            interfaces = {
                ADAPTER: {
                    "Address": Variant("s", "00:AA:01:00:00:%02X" % number),
                    "Name": Variant("s", name), "Alias": Variant("s", name),
                    "Powered": Variant("b", powered), "Discovering": Variant("b", False),
                },
                ADVERTISING: {
                    "ActiveInstances": Variant("y", 0),
                    "SupportedInstances": Variant("y", MAX_ADVERTISEMENTS),
                    "SupportedIncludes": Variant("as", ["tx-power"]),
                },
            }
            if monitors:
                interfaces[MONITORS] = {"SupportedMonitorTypes": Variant("as", ["or_patterns"]),
                                        "SupportedFeatures": Variant("as", [])}
            self.add_object(path, interfaces)
            return "o", [path]
        if member == "RemoveAdapter":
            adapter = self.adapter_path(args[0])
            for path in [p for p in self.objects if p.startswith(adapter + "/")]:
                self.remove_object(path)
            self.drop_adapter_state(adapter, release=True)
            self.remove_object(adapter)
            return "", []
        if member == "SetPowered":
            adapter = self.adapter_path(args[0])
            self.power(adapter, args[1])
            return "", []
        if member == "AddDevice":
            name, address, data, rssi = args
            adapter = self.adapter_path(name)
            path = adapter + "/dev_" + address.replace(":", "_")
            props = {"Address": Variant("s", address), "AddressType": Variant("s", "random"),
                     "Adapter": Variant("o", adapter), "Paired": Variant("b", False),
                     "Trusted": Variant("b", False), "Connected": Variant("b", False),
                     "RSSI": Variant("n", rssi), "ServiceData": Variant("a{sv}", data)}
            self.add_object(path, {DEVICE: props})
            return "o", [path]
        if member == "UpdateDevice":
            path, data, rssi = args
            self.set_properties(path, DEVICE, {"ServiceData": Variant("a{sv}", data), "RSSI": Variant("n", rssi)})
            return "", []
        if member == "RemoveDevice":
            self.remove_object(args[0])
            return "", []
        if member == "Flood":
            asyncio.ensure_future(self.flood(*args))
            return "", []
        if member == "DropDiscovery":
            # What bluetoothd does when the kernel refuses to start discovery
            # after StartDiscovery was answered: the sessions go, Discovering
            # turns false.
            adapter = self.adapter_path(args[0])
            self.discovering.pop(adapter, None)
            self.set_properties(adapter, ADAPTER, {"Discovering": Variant("b", False)})
            return "", []
        if member == "Refuse":
            self.refusal = args[0] or None
            return "", []
        if member == "ReleaseAdvertisements":
            for key in list(self.advertisements):
                self.release_advertisement(key)
            return "", []
        if member == "MonitorFound":
            for sender, root in list(self.monitors):
                for path in self.monitors[(sender, root)]["monitors"]:
                    self.bus.send(Message(destination=sender, path=path, interface="org.bluez.AdvertisementMonitor1",
                                          member="DeviceFound", signature="o", body=[args[0]]))
            return "", []
        raise DBusError("org.freedesktop.DBus.Error.UnknownMethod", member)

    async def flood(self, path, data, rate, seconds, flood_id):
        """Reports `path` `rate` times a second for `seconds`, as bluetoothd does
        with DuplicateData: a ServiceData and RSSI change per advertisement.
        Prints `flooded ID SENT SECONDS` when done."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        sent = 0
        while sent < rate * seconds:
            due = start + sent / rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            self.set_properties(path, DEVICE, {"ServiceData": Variant("a{sv}", data),
                                               "RSSI": Variant("n", -60 - sent % 10)})
            sent += 1
        print("flooded %s %d %.3f" % (flood_id, sent, loop.time() - start), flush=True)

    def power(self, adapter, powered):
        if not powered:
            # Powering off ends discovery; advertisements stay registered and
            # go back on air with the power, as in bluetoothd.
            self.discovering.pop(adapter, None)
            self.objects[adapter][ADAPTER]["Discovering"] = Variant("b", False)
        self.set_properties(adapter, ADAPTER, {"Powered": Variant("b", powered)})

    def release_advertisement(self, key):
        record = self.advertisements.pop(key)
        self.bus.send(Message(destination=record["sender"], path=record["path"],
                              interface="org.bluez.LEAdvertisement1", member="Release"))
        self.count_advertisements(record["adapter"])

    def drop_adapter_state(self, adapter, release):
        self.discovering.pop(adapter, None)
        for key, record in list(self.advertisements.items()):
            if record["adapter"] == adapter:
                if release:
                    self.release_advertisement(key)
                else:
                    del self.advertisements[key]

    def client_left(self, name):
        for adapter, senders in self.discovering.items():
            senders.discard(name)
        for key in [k for k in self.advertisements if k[0] == name]:
            del self.advertisements[key]
        for key in [k for k in self.monitors if k[0] == name]:
            del self.monitors[key]
        self.filters = {k: v for k, v in self.filters.items() if k[1] != name}

    def count_advertisements(self, adapter):
        active = sum(1 for r in self.advertisements.values() if r["adapter"] == adapter)
        if adapter in self.objects:
            self.set_properties(adapter, ADVERTISING, {"ActiveInstances": Variant("y", active),
                                                       "SupportedInstances": Variant("y", MAX_ADVERTISEMENTS - active)})

    # -- BlueZ ------------------------------------------------------------

    async def bluez(self, msg):
        """Answers one BlueZ call; returns (signature, body) or raises DBusError."""
        if self.refusal:
            raise DBusError(self.refusal, "refused by the test")
        path, interface, member, sender = msg.path, msg.interface, msg.member, msg.sender
        if (interface, member) == (OBJECT_MANAGER, "GetManagedObjects") and path == "/":
            return "a{oa{sa{sv}}}", [self.objects]
        interfaces = self.objects.get(path)
        if interfaces is None:
            raise DBusError("org.freedesktop.DBus.Error.UnknownObject", path)
        if interface == PROPERTIES:
            return self.properties(msg, interfaces)
        if interface not in interfaces:
            raise DBusError("org.freedesktop.DBus.Error.UnknownInterface", interface)
        if interface == ADAPTER:
            return self.adapter_call(path, member, sender, msg.body)
        if interface == ADVERTISING:
            return await self.advertising_call(path, member, sender, msg.body)
        if interface == MONITORS:
            return await self.monitor_call(path, member, sender, msg.body)
        raise DBusError("org.freedesktop.DBus.Error.UnknownMethod", member)

    def properties(self, msg, interfaces):
        if msg.member == "GetAll":
            return "a{sv}", [interfaces.get(msg.body[0], {})]
        if msg.member == "Get":
            interface, name = msg.body
            if name not in interfaces.get(interface, {}):
                raise DBusError("org.freedesktop.DBus.Error.InvalidArgs", "no property " + name)
            return "v", [interfaces[interface][name]]
        if msg.member == "Set" and msg.body[:2] == [ADAPTER, "Powered"]:
            self.power(msg.path, msg.body[2].value)
            return "", []
        raise DBusError("org.freedesktop.DBus.Error.PropertyReadOnly", "read-only")

    def adapter_call(self, adapter, member, sender, args):
        if member == "SetDiscoveryFilter":
            for key, value in args[0].items():
                if FILTER_KEYS.get(key) != value.signature:
                    raise DBusError("org.bluez.Error.InvalidArguments", "bad filter key " + key)
            self.filters[(adapter, sender)] = args[0]
            return "", []
        if member == "StartDiscovery":
            if not self.powered(adapter):
                raise DBusError("org.bluez.Error.NotReady", "Resource Not Ready")
            senders = self.discovering.setdefault(adapter, set())
            if sender in senders:
                raise DBusError("org.bluez.Error.InProgress", "Operation already in progress")
            senders.add(sender)
            if len(senders) == 1:
                self.set_properties(adapter, ADAPTER, {"Discovering": Variant("b", True)})
            return "", []
        if member == "StopDiscovery":
            if not self.powered(adapter):
                raise DBusError("org.bluez.Error.NotReady", "Resource Not Ready")
            senders = self.discovering.get(adapter, set())
            if sender not in senders:
                raise DBusError("org.bluez.Error.Failed", "No discovery started")
            senders.discard(sender)
            if not senders:
                self.set_properties(adapter, ADAPTER, {"Discovering": Variant("b", False)})
            return "", []
        if member == "RemoveDevice":
            if args[0] not in self.objects or not args[0].startswith(adapter + "/"):
                raise DBusError("org.bluez.Error.DoesNotExist", "Does Not Exist")
            self.remove_object(args[0])
            return "", []
        raise DBusError("org.freedesktop.DBus.Error.UnknownMethod", member)

    async def advertising_call(self, adapter, member, sender, args):
        key = (sender, args[0])
        if member == "UnregisterAdvertisement":
            if key not in self.advertisements:
                raise DBusError("org.bluez.Error.DoesNotExist", "Does Not Exist")
            del self.advertisements[key]
            self.count_advertisements(adapter)
            return "", []
        if member != "RegisterAdvertisement":
            raise DBusError("org.freedesktop.DBus.Error.UnknownMethod", member)
        if key in self.advertisements:
            raise DBusError("org.bluez.Error.AlreadyExists", "Already Exists")
        if sum(1 for r in self.advertisements.values() if r["adapter"] == adapter) >= MAX_ADVERTISEMENTS:
            raise DBusError("org.bluez.Error.NotPermitted", "Maximum advertisements reached")
        # Like bluetoothd: read the object's properties back from its owner.
        reply = await self.bus.call(Message(destination=sender, path=args[0], interface=PROPERTIES, member="GetAll",
                                            signature="s", body=["org.bluez.LEAdvertisement1"]))
        if reply.message_type == MessageType.ERROR:
            raise DBusError("org.bluez.Error.Failed", "Failed to parse advertisement.")
        props = reply.body[0]
        kind = props.get("Type", Variant("s", "broadcast")).value
        if kind not in ("broadcast", "peripheral"):
            raise DBusError("org.bluez.Error.Failed", "Failed to parse advertisement.")
        data = b""
        service_data = {}
        for uuid, value in props.get("ServiceData", Variant("a{sv}", {})).value.items():
            if value.signature != "ay":
                raise DBusError("org.bluez.Error.Failed", "Failed to parse advertisement.")
            service_data[uuid] = value.value.hex()
            body = bytes([0x21]) + uuid_bytes(uuid) + value.value
            data += bytes([len(body)]) + body
        if len(data) > 31:
            raise DBusError("org.bluez.Error.Failed", "Failed to parse advertisement.")  # as 5.66 answers (rig)
        self.advertisements[key] = {"sender": sender, "path": args[0], "adapter": adapter, "type": kind,
                                    "properties": sorted(props), "service_data": service_data, "data": data.hex()}
        self.count_advertisements(adapter)
        return "", []

    async def monitor_call(self, adapter, member, sender, args):
        key = (sender, args[0])
        if member == "UnregisterMonitor":
            if key not in self.monitors:
                raise DBusError("org.bluez.Error.DoesNotExist", "Does Not Exist")
            del self.monitors[key]
            return "", []
        if member != "RegisterMonitor":
            raise DBusError("org.freedesktop.DBus.Error.UnknownMethod", member)
        if key in self.monitors:
            raise DBusError("org.bluez.Error.AlreadyExists", "Already Exists")
        reply = await self.bus.call(Message(destination=sender, path=args[0], interface=OBJECT_MANAGER,
                                            member="GetManagedObjects"))
        if reply.message_type == MessageType.ERROR:
            raise DBusError("org.bluez.Error.Failed", "Failed to read monitors")
        monitors = {}
        for path, interfaces in reply.body[0].items():
            props = interfaces.get("org.bluez.AdvertisementMonitor1")
            if props is None:
                continue
            if props["Type"].value != "or_patterns" or not props["Patterns"].value:
                raise DBusError("org.bluez.Error.InvalidArguments", "bad monitor " + path)
            monitors[path] = {name: plain(value) for name, value in props.items()}
        self.monitors[key] = {"adapter": adapter, "monitors": monitors}
        for path in monitors:
            self.bus.send(Message(destination=sender, path=path, interface="org.bluez.AdvertisementMonitor1",
                                  member="Activate"))
        return "", []

    # -- dispatch ---------------------------------------------------------

    def handle(self, msg):
        if msg.message_type == MessageType.SIGNAL and msg.member == "NameOwnerChanged" and msg.body[2] == "":
            self.client_left(msg.body[0])
            return False
        if msg.message_type != MessageType.METHOD_CALL:
            return False
        if msg.path == CONTROL_PATH and msg.interface == CONTROL:
            signature, body = self.control(msg)
            return Message.new_method_return(msg, signature, body)
        if msg.interface == "org.freedesktop.DBus.Introspectable":
            return False
        asyncio.ensure_future(self.answer(msg))
        return True

    async def answer(self, msg):
        try:
            signature, body = await self.bluez(msg)
            self.bus.send(Message.new_method_return(msg, signature, body))
            outcome = "ok"
        except DBusError as error:
            self.bus.send(error._as_message(msg))
            outcome = error.type
        record = {"member": msg.member, "interface": msg.interface, "path": msg.path,
                  "args": json.dumps(plain(msg.body), sort_keys=True), "outcome": outcome}
        if outcome == "ok":
            self.answered[msg.member] = record["n"] = self.answered.get(msg.member, 0) + 1
        if msg.member == "RegisterAdvertisement" and outcome == "ok":
            record["advertisement"] = self.advertisements[(msg.sender, msg.body[0])]
        if msg.member == "RegisterMonitor" and outcome == "ok":
            record["monitors"] = json.dumps(self.monitors[(msg.sender, msg.body[0])]["monitors"], sort_keys=True)
        print("call " + json.dumps(record, sort_keys=True), flush=True)


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bus", required=True, help="D-Bus address of the bus to serve")
    parser.add_argument("--adapter", action="append", default=[],
                        help="an adapter to start with: NAME[:off][:nomonitor]")
    options = parser.parse_args()
    bus = await MessageBus(bus_address=options.bus).connect()
    standin = StandIn(bus)
    bus.add_message_handler(standin.handle)
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus", member="AddMatch", signature="s",
                           body=["type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'"]))
    for spec in options.adapter:
        name, *flags = spec.split(":")
        standin.control(Message(path=CONTROL_PATH, interface=CONTROL, member="AddAdapter", signature="sbb",
                                body=[name, "off" not in flags, "nomonitor" not in flags]))
    await bus.request_name("org.bluez")
    print("ready", flush=True)
    await bus.wait_for_disconnect()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
