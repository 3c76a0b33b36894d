"""nearbyd's D-Bus calls for the load clients of nearby-bench (soak_clients.py,
isolation_load.py), through dbus-next's low-level API: no introspection, so
a client costs its own calls and nothing more.
"""
import collections
import json

from dbus_next import Message, MessageType, Variant
from dbus_next.aio import MessageBus

NEARBYD = "org.nearbyd"
ROOT = "/org/nearbyd"
NEARBY1 = "org.nearbyd.Nearby1"
MANAGER1 = "org.nearbyd.Manager1"
UPSTREAM1 = "org.nearbyd.Upstream1"


def say(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


class Refused(Exception):
    """nearbyd (or the bus) answered a call with an error."""

    def __init__(self, name, text):
        super().__init__("%s: %s" % (name, text))
        self.name = name


async def connect(address):
    return await MessageBus(bus_address=address).connect()


async def call(bus, path, interface, member, signature="", body=(), destination=NEARBYD):
    reply = await bus.call(Message(destination=destination, path=path, interface=interface, member=member,
                                   signature=signature, body=list(body)))
    if reply.message_type == MessageType.ERROR:
        raise Refused(reply.error_name, reply.body[0] if reply.body else "")
    return reply.body


async def create_manager(bus, api_key, params=None):
    return (await call(bus, ROOT, NEARBY1, "CreateManager", "sa{sv}", [api_key, params or {}]))[0]


async def create_app_manager(bus, api_key, app_id):
    return await create_manager(bus, api_key, {"AppId": Variant("s", app_id)})


async def publish(bus, manager, content, kind):
    return (await call(bus, manager, MANAGER1, "Publish", "aysa{sv}", [content, kind, {}]))[0]


async def subscribe(bus, manager, kind):
    return (await call(bus, manager, MANAGER1, "Subscribe", "a{sv}", [{"Type": Variant("s", kind)}]))[0]


async def set_direct_channel(bus, manager, wanted):
    await call(bus, manager, "org.freedesktop.DBus.Properties", "Set", "ssv",
               [UPSTREAM1, "DirectChannel", Variant("b", wanted)])


async def send_message(bus, manager, to, message_id, ttl_seconds):
    await call(bus, manager, UPSTREAM1, "SendMessage", "a{ss}ssx", [{"n": message_id}, to, message_id, ttl_seconds])


class Tally:
    """Outcomes of calls by method: "ok" or the error's name, counted."""

    def __init__(self):
        self.counts = collections.Counter()

    async def run(self, method, awaitable):
        """The call's result, or None when it was refused (counted either way)."""
        try:
            result = await awaitable
        except Refused as error:
            self.counts["%s %s" % (method, error.name)] += 1
            return None
        self.counts["%s ok" % method] += 1
        return result

    def refused(self):
        return sum(count for key, count in self.counts.items() if not key.endswith(" ok"))

    def as_dict(self):
        return dict(sorted(self.counts.items()))
