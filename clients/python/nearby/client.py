"""nearbyd's D-Bus API (doc/dbus-api.md) as Python objects: a manager, its
publications and subscriptions, with found and lost as callbacks."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from dbus_fast import BusType, MessageType, Variant
from dbus_fast import Message as DBusMessage
from dbus_fast.aio import MessageBus

BUS_NAME = "org.nearbyd"
ROOT = "/org/nearbyd"
NEARBY1 = "org.nearbyd.Nearby1"
MANAGER1 = "org.nearbyd.Manager1"
PUBLICATION1 = "org.nearbyd.Publication1"
SUBSCRIPTION1 = "org.nearbyd.Subscription1"
UPSTREAM1 = "org.nearbyd.Upstream1"
PERMISSION_REQUEST1 = "org.nearbyd.PermissionRequest1"
PERMISSION_AGENT1 = "org.nearbyd.PermissionAgent1"
PROPERTIES = "org.freedesktop.DBus.Properties"
DBUS = "org.freedesktop.DBus"
# Where a client's own objects for nearbyd to call live (NearbyBusContract.clientExportRoot).
EXPORT_ROOT = "/org/nearbyd/client"

logger = logging.getLogger("nearby")


class NearbyError(Exception):
    """A call nearbyd (or the bus) refused: `name` is the D-Bus error, such as
    org.nearbyd.Error.NotPermitted, and the message says why."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class Message:
    """A message: up to 100 KiB of content, of a type in a namespace (empty:
    the project's own)."""

    content: bytes
    type: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class Beacon:
    """The beacon a message came through: `kind` is eddystone-uid,
    eddystone-eid or ibeacon, `id` the advertised id in hex."""

    kind: str
    id: str
    tx_power: int


@dataclass(frozen=True)
class MessageInfo:
    """How a found message was heard: `medium` is "ble" or "audio"; `rssi` is
    the signal strength in dBm over BLE, the level in dBFS over audio;
    `beacon` the beacon, for a beacon's attachment or a raw beacon."""

    medium: str
    rssi: int
    distance: float
    beacon: Beacon | None = None


@dataclass
class Strategy:
    """Publish's and Subscribe's Strategy (dbus-api.md): every field optional."""

    mediums: list[str] | None = None
    mode: str | None = None
    ttl_seconds: int | None = None
    allow_in_background: bool | None = None

    def variant(self) -> Variant:
        fields: dict[str, Variant] = {}
        if self.mediums is not None:
            fields["Mediums"] = Variant("as", self.mediums)
        if self.mode is not None:
            fields["Mode"] = Variant("s", self.mode)
        if self.ttl_seconds is not None:
            fields["TTL"] = Variant("u", self.ttl_seconds)
        if self.allow_in_background is not None:
            fields["AllowInBackground"] = Variant("b", self.allow_in_background)
        return Variant("a{sv}", fields)


Found = Callable[[Message, MessageInfo], None]
PermissionRequest = Callable[[list[str]], Awaitable[bool]]
"""The app's own permission dialog: given the mediums asked for, the user's yes or no."""


class _Live:
    """What a publication and a subscription share: ending, and their status."""

    manager: MessageManager
    path: str
    ended: bool

    async def _end(self, interface: str, member: str) -> None:
        if self.ended:
            return
        self.ended = True
        self.manager._forget(self)  # type: ignore[arg-type]
        await self.manager._call(self.path, interface, member)


@dataclass
class Upstream:
    """What an app hears of its upstream messages and its application server
    (Upstream1's signals): each handler optional."""

    succeeded: Callable[[str], None] | None = None
    """The application server acked the message of this id."""
    failed: Callable[[str, str, str], None] | None = None
    """The message failed: its id, the error (TTL_EXCEEDED, ...) and why."""
    received: Callable[[dict[str, str], str, str], None] | None = None
    """A downstream message: its data, its sender id, its id."""


@dataclass(frozen=True)
class DaemonStatus:
    """What `nearbyctl status` shows: nearbyd's version, the mediums it can
    use now, and nearby-server as it meets it (`connected: URL`, ...)."""

    version: str
    available_mediums: list[str]
    server: str


async def status(bus_address: str | None = None) -> DaemonStatus:
    """nearbyd's status (Nearby1's properties), on the system bus or at `bus_address`."""
    bus = await (MessageBus(bus_address=bus_address) if bus_address else MessageBus(bus_type=BusType.SYSTEM)).connect()
    try:
        reply = await bus.call(DBusMessage(destination=BUS_NAME, path=ROOT, interface=PROPERTIES, member="GetAll",
                                           signature="s", body=[NEARBY1]))
        values = MessageManager._answer(reply)
        return DaemonStatus(values["Version"].value, list(values["AvailableMediums"].value), values["Server"].value)
    finally:
        bus.disconnect()


@dataclass(eq=False)
class Publication(_Live):
    """A message published until `unpublish()`, its TTL, or its manager's release."""

    manager: MessageManager
    message: Message
    strategy: Strategy | None
    on_expired: Callable[[], None] | None
    dialog: str | None = None
    path: str = ""
    ended: bool = False

    async def unpublish(self) -> None:
        """Ends it; devices nearby lose it."""
        await self._end(PUBLICATION1, "Unpublish")

    async def status(self) -> tuple[str, str]:
        """`Status` and `StatusReason`: ("active", "") once it is heard, else why not."""
        return await self.manager._status(self.path, PUBLICATION1)

    async def _make(self) -> None:
        params: dict[str, Variant] = {}
        if self.message.namespace:
            params["Namespace"] = Variant("s", self.message.namespace)
        if self.strategy is not None:
            params["Strategy"] = self.strategy.variant()
        if self.dialog is not None:
            params["PermissionRequestHandler"] = Variant("o", self.dialog)
        self.path = await self.manager._call(self.manager.path, MANAGER1, "Publish", "aysa{sv}",
                                             [self.message.content, self.message.type, params])


@dataclass(eq=False)
class Subscription(_Live):
    """Messages of a type nearby, found and lost, until `unsubscribe()`."""

    manager: MessageManager
    type: str
    namespace: str
    strategy: Strategy | None
    on_found: Found | None
    on_lost: Found | None
    on_expired: Callable[[], None] | None
    beacons: dict[str, Variant] | None = None
    dialog: str | None = None
    path: str = ""
    ended: bool = False
    found: set[tuple[bytes, str, str]] = field(default_factory=set)

    async def unsubscribe(self) -> None:
        """Ends it; nothing more is found or lost."""
        await self._end(SUBSCRIPTION1, "Unsubscribe")

    async def status(self) -> tuple[str, str]:
        """`Status` and `StatusReason`, as for a publication."""
        return await self.manager._status(self.path, SUBSCRIPTION1)

    async def _make(self) -> None:
        params: dict[str, Variant] = {"Type": Variant("s", self.type)}
        if self.beacons is not None:
            params["DeviceTypes"] = Variant("as", ["ble-beacon"])
            params["BeaconStrategy"] = Variant("a{sv}", self.beacons)
        if self.namespace:
            params["Namespace"] = Variant("s", self.namespace)
        if self.strategy is not None:
            params["Strategy"] = self.strategy.variant()
        if self.dialog is not None:
            params["PermissionRequestHandler"] = Variant("o", self.dialog)
        self.path = await self.manager._call(self.manager.path, MANAGER1, "Subscribe", "a{sv}", [params])

    def _signal(self, member: str, body: list[Any]) -> None:
        if member == "Expired":
            self.ended = True
            self.manager._forget(self)
            if self.on_expired:
                self.on_expired()
            return
        content, namespace, type_, info = body
        message = Message(bytes(content), type_, namespace)
        beacon = info["Beacon"].value if "Beacon" in info else None
        heard = MessageInfo(info["Medium"].value, info["Rssi"].value, info["DistanceMeters"].value,
                            Beacon(beacon["Kind"].value, beacon["Id"].value, beacon["TxPower"].value) if beacon else None)
        key = (message.content, namespace, type_)
        if member == "MessageFound":
            self.found.add(key)
            if self.on_found:
                self.on_found(message, heard)
        elif member == "MessageLost":
            self.found.discard(key)
            if self.on_lost:
                self.on_lost(message, heard)


class MessageManager:
    """An app's access to Nearby under one API key (`CreateManager`): what it
    publishes and subscribes to, its permission and error state. Made again,
    with its publications and subscriptions, when nearbyd restarts."""

    def __init__(self, bus: MessageBus, api_key: str, params: dict[str, Variant], upstream: Upstream | None = None,
                 on_permission_changed: Callable[[bool], None] | None = None,
                 on_background_changed: Callable[[bool], None] | None = None) -> None:
        self.bus = bus
        self.upstream = upstream or Upstream()
        self.on_permission_changed = on_permission_changed
        self.on_background_changed = on_background_changed
        self.direct_channel = False
        # What the app set, set again on a restarted nearbyd (None: never set).
        self.background_wish: bool | None = None
        self.api_key = api_key
        self.params = params
        self.path = ""
        self.owner = ""
        self.objects: list[Publication | Subscription] = []
        # Signals of objects whose path is not known here yet: nearbyd may
        # signal right after the reply that names a new object's path (a
        # beacon already in range), and they are read before the call that
        # made the object returns. Kept for it, the last 256 at most.
        self._unclaimed: collections.deque[DBusMessage] = collections.deque(maxlen=256)
        self.released = False
        self._revival: asyncio.Task[None] | None = None
        # The app's permission dialogs this client answers for nearbyd, by path.
        self._dialogs: dict[str, PermissionRequest] = {}
        self._answering: set[asyncio.Task[None]] = set()

    @classmethod
    async def create(cls, api_key: str, app_id: str | None = None, bus_address: str | None = None,
                     upstream: Upstream | None = None, on_permission_changed: Callable[[bool], None] | None = None,
                     on_background_changed: Callable[[bool], None] | None = None) -> MessageManager:
        """A manager on the system bus, or on the bus at `bus_address`;
        `upstream` hears of its upstream messages and downstream ones;
        `on_permission_changed` gets `PermissionGranted` each time it changes,
        whoever changed it, and `on_background_changed` gets `Background`
        each time it changes (set by the app, or by nearbyd as the user's
        login session goes inactive or locked and back).
        Raises NearbyError when nearbyd refuses it or is not running."""
        bus = await (MessageBus(bus_address=bus_address) if bus_address else MessageBus(bus_type=BusType.SYSTEM)).connect()
        params = {"AppId": Variant("s", app_id)} if app_id else {}
        manager = cls(bus, api_key, params, upstream, on_permission_changed, on_background_changed)
        bus.add_message_handler(manager._on_message)
        await manager._call_bus("AddMatch", "s", [f"type='signal',sender='{DBUS}',member='NameOwnerChanged',arg0='{BUS_NAME}'"])
        manager.owner = await manager._call_bus("GetNameOwner", "s", [BUS_NAME])
        manager.path = await manager._call(ROOT, NEARBY1, "CreateManager", "sa{sv}", [api_key, params])
        return manager

    async def publish(self, content: bytes, type: str = "", namespace: str = "", strategy: Strategy | None = None,
                      on_expired: Callable[[], None] | None = None,
                      permission_request: PermissionRequest | None = None) -> Publication:
        """Publishes `content` as a message of `type` (`Publish`).
        `permission_request`, the app's own dialog, is asked instead of the
        session's permission agent when the user has not decided yet whether
        the app may use Nearby (dbus-api.md, "Permissions"); only nearbyd may
        call it."""
        publication = Publication(self, Message(content, type, namespace), strategy, on_expired,
                                  self._dialog(permission_request))
        await publication._make()
        self._adopt(publication)
        return publication

    async def subscribe(self, type: str = "", namespace: str = "", strategy: Strategy | None = None,
                        on_found: Found | None = None, on_lost: Found | None = None,
                        on_expired: Callable[[], None] | None = None,
                        permission_request: PermissionRequest | None = None) -> Subscription:
        """Subscribes to messages of `type` (every type: empty) nearby
        (`Subscribe`); `permission_request` as for `publish`."""
        subscription = Subscription(self, type, namespace, strategy, on_found, on_lost, on_expired,
                                    dialog=self._dialog(permission_request))
        await subscription._make()
        self._adopt(subscription)
        return subscription

    async def subscribe_beacons(self, type: str = "", namespace: str = "", raw: bool = False,
                                include_ibeacons: bool = True, on_found: Found | None = None,
                                on_lost: Found | None = None) -> Subscription:
        """Subscribes to the attachments of the project's beacons in range
        (dbus-api.md, "Beacons"), or with `raw` to every beacon heard, each a
        message of the reserved namespace whose content is the beacon's id;
        `info.beacon` says which beacon."""
        strategy = {"RawBeacons": Variant("b", raw), "IncludeIBeacons": Variant("b", include_ibeacons)}
        subscription = Subscription(self, type, namespace, None, on_found, on_lost, None, strategy)
        await subscription._make()
        self._adopt(subscription)
        return subscription

    async def permission_granted(self) -> bool:
        """Whether the user allows this app to use Nearby (`PermissionGranted`)."""
        return bool(await self._get(self.path, MANAGER1, "PermissionGranted"))

    async def set_permission_granted(self, granted: bool) -> None:
        """Records the user's decision for this app, as a settings panel would."""
        await self._set(self.path, MANAGER1, "PermissionGranted", Variant("b", granted))

    async def background(self) -> bool:
        """Whether the app is in the background now (`Background`): as it set
        it, or because its login session is inactive or locked."""
        return bool(await self._get(self.path, MANAGER1, "Background"))

    async def set_background(self, background: bool) -> None:
        """Tells nearbyd the app is in the background (or back): meanwhile only
        its objects with `allow_in_background` run, on BLE alone, and the
        others are `inactive` until it comes back. Set again on a restarted nearbyd."""
        self.background_wish = background
        await self._set(self.path, MANAGER1, "Background", Variant("b", background))

    async def set_direct_channel(self, wanted: bool) -> None:
        """Asks for the direct channel to nearby-server (`DirectChannel`): upstream
        messages go while it is open, downstream ones come through it."""
        self.direct_channel = wanted
        await self._set(self.path, UPSTREAM1, "DirectChannel", Variant("b", wanted))

    async def send(self, data: dict[str, str], to: str, message_id: str, ttl_seconds: int = 60) -> None:
        """Sends an upstream message to the application server `to`
        (SENDER_ID@DOMAIN); its verdict comes to `upstream`. Kept on disk by
        nearbyd until then."""
        await self._call(self.path, UPSTREAM1, "SendMessage", "a{ss}ssx", [data, to, message_id, ttl_seconds])

    async def error_state(self) -> dict[str, bool]:
        """The manager's error properties (`ApiKeyError`, `BluetoothPowerError`, ...), true while each holds."""
        names = ["ApiKeyError", "BluetoothPowerError", "BluetoothPermissionError", "MicrophonePermissionError"]
        return {name: bool(await self._get(self.path, MANAGER1, name)) for name in names}

    async def release(self) -> None:
        """Ends the manager and everything it published or subscribed to."""
        if self.released:
            return
        self.released = True
        self.objects.clear()
        try:
            await self._call(self.path, MANAGER1, "Release")
        finally:
            self.bus.disconnect()

    # Signals: believed from nearbyd's owner only, for this manager's objects only.

    def _on_message(self, message: DBusMessage) -> DBusMessage | bool | None:
        if message.message_type == MessageType.METHOD_CALL and message.path in self._dialogs:
            return self._dialog_called(message)
        if message.message_type != MessageType.SIGNAL:
            return None
        if message.sender == DBUS and message.member == "NameOwnerChanged" and message.body[0] == BUS_NAME:
            self._owner_changed(message.body[2])
            return
        if not self.owner or message.sender != self.owner:
            return
        if message.path == self.path and message.member == "PropertiesChanged" and message.body[0] == MANAGER1:
            changed = message.body[1]
            if "PermissionGranted" in changed and self.on_permission_changed:
                self.on_permission_changed(bool(changed["PermissionGranted"].value))
            if "Background" in changed and self.on_background_changed:
                self.on_background_changed(bool(changed["Background"].value))
            return
        if message.path == self.path and message.interface == UPSTREAM1:
            if message.member == "SendSucceeded" and self.upstream.succeeded:
                self.upstream.succeeded(message.body[0])
            elif message.member == "SendFailed" and self.upstream.failed:
                self.upstream.failed(*message.body)
            elif message.member == "MessageReceived" and self.upstream.received:
                self.upstream.received(dict(message.body[0]), message.body[1], message.body[2])
            return
        for thing in list(self.objects):
            if thing.path == message.path:
                self._dispatch(thing, message)
                return
        if self.path and message.path.startswith(self.path + "/"):
            self._unclaimed.append(message)

    def _owner_changed(self, owner: str) -> None:
        self.owner = owner
        if owner and not self.released:
            # nearbyd restarted: the manager and its objects are made again on the new one.
            self._revival = asyncio.ensure_future(self._revive())

    async def _revive(self) -> None:
        try:
            await self._make_again()
        except NearbyError as error:
            # The objects stay dead until nearbyd's next start makes them again.
            logger.warning("nearbyd restarted, and making the manager again failed: %s", error)

    async def _make_again(self) -> None:
        self.path = await self._call(ROOT, NEARBY1, "CreateManager", "sa{sv}", [self.api_key, self.params])
        if self.background_wish is not None:
            await self._set(self.path, MANAGER1, "Background", Variant("b", self.background_wish))
        if self.direct_channel:
            await self._set(self.path, UPSTREAM1, "DirectChannel", Variant("b", True))
        for thing in list(self.objects):
            if isinstance(thing, Subscription):
                # What was found is found afresh by the new subscription; lost ones are said lost.
                for content, namespace, type_ in list(thing.found):
                    thing._signal("MessageLost", [content, namespace, type_,
                                                  {"Medium": Variant("s", ""), "Rssi": Variant("n", 0),
                                                   "DistanceMeters": Variant("d", 0.0)}])
            await thing._make()
            self._replay(thing)

    def _adopt(self, thing: Publication | Subscription) -> None:
        """Takes a new object, with the signals it was sent before its path was known here."""
        self.objects.append(thing)
        self._replay(thing)

    def _replay(self, thing: Publication | Subscription) -> None:
        claimed = [message for message in self._unclaimed if message.path == thing.path]
        for message in claimed:
            self._unclaimed.remove(message)
            self._dispatch(thing, message)

    def _dispatch(self, thing: Publication | Subscription, message: DBusMessage) -> None:
        if isinstance(thing, Subscription):
            thing._signal(message.member, message.body)
        elif message.member == "Expired":
            thing.ended = True
            self._forget(thing)
            if thing.on_expired:
                thing.on_expired()

    def _forget(self, thing: Publication | Subscription) -> None:
        if thing in self.objects:
            self.objects.remove(thing)
        if thing.dialog is not None:
            self._dialogs.pop(thing.dialog, None)

    # The app's permission dialogs, called by nearbyd.

    def _dialog(self, answer: PermissionRequest | None) -> str | None:
        """A path for nearbyd to call `answer` at, or None."""
        if answer is None:
            return None
        path = f"{EXPORT_ROOT}/permission_request_{id(self)}_{len(self._dialogs) + 1}"
        self._dialogs[path] = answer
        return path

    def _dialog_called(self, call: DBusMessage) -> DBusMessage | bool:
        """Answers a call of a dialog: nearbyd's (the owner of `org.nearbyd`
        now) alone, and `Request` alone; the answer comes when the app's
        dialog has given it."""
        if call.sender != self.owner:
            return DBusMessage.new_error(call, "org.freedesktop.DBus.Error.AccessDenied", f"only nearbyd may call {call.path}")
        if call.interface != PERMISSION_REQUEST1 or call.member != "Request" or call.signature != "as":
            return DBusMessage.new_error(call, "org.freedesktop.DBus.Error.UnknownMethod",
                                         f"{call.path} answers {PERMISSION_REQUEST1}.Request(as) alone")
        answer = self._dialogs[call.path]

        async def reply() -> None:
            try:
                granted = bool(await answer(list(call.body[0])))
                await self.bus.send(DBusMessage.new_method_return(call, "b", [granted]))
            except Exception as error:  # the app's dialog failed: nearbyd counts it as a no, for this call
                await self.bus.send(DBusMessage.new_error(call, "org.nearbyd.Error.Failed", f"the app's dialog failed: {error}"))

        task = asyncio.ensure_future(reply())
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)
        return True

    # Calls.

    async def _call(self, path: str, interface: str, member: str, signature: str = "", body: list[Any] | None = None) -> Any:
        reply = await self.bus.call(DBusMessage(destination=BUS_NAME, path=path, interface=interface, member=member,
                                                signature=signature, body=body or []))
        return self._answer(reply)

    async def _call_bus(self, member: str, signature: str, body: list[Any]) -> Any:
        reply = await self.bus.call(DBusMessage(destination=DBUS, path="/org/freedesktop/DBus", interface=DBUS,
                                                member=member, signature=signature, body=body))
        return self._answer(reply)

    async def _get(self, path: str, interface: str, name: str) -> Any:
        value = await self._call(path, PROPERTIES, "Get", "ss", [interface, name])
        return value.value

    async def _set(self, path: str, interface: str, name: str, value: Variant) -> None:
        await self._call(path, PROPERTIES, "Set", "ssv", [interface, name, value])

    async def _status(self, path: str, interface: str) -> tuple[str, str]:
        return await self._get(path, interface, "Status"), await self._get(path, interface, "StatusReason")

    @staticmethod
    def _answer(reply: DBusMessage | None) -> Any:
        if reply is None:
            raise NearbyError("org.freedesktop.DBus.Error.NoReply", "no answer")
        if reply.message_type == MessageType.ERROR:
            raise NearbyError(reply.error_name or "", reply.body[0] if reply.body else "")
        return reply.body[0] if reply.body else None


@dataclass(frozen=True)
class AgentRequest:
    """What nearbyd asks a permission agent: may the app `app_id` use
    Nearby on `mediums`; `details` are the caller's user, process and bus
    name and the app's usage descriptions (dbus-api.md, RequestPermission)."""

    app_id: str
    mediums: list[str]
    details: dict[str, Any]


class PermissionAgent:
    """The user's permission agent (`org.nearbyd.PermissionAgent1`): nearbyd
    asks it whether an app may use Nearby when its user has not decided and
    the app brought no dialog of its own, as a desktop's prompt would.
    Registered for the caller's login session, and again with a restarted
    nearbyd; only nearbyd's calls are answered."""

    def __init__(self, bus: MessageBus, answer: Callable[[AgentRequest], Awaitable[bool]],
                 on_registered_again: Callable[[], None] | None = None) -> None:
        self.bus = bus
        self.answer = answer
        self.on_registered_again = on_registered_again
        self.path = f"{EXPORT_ROOT}/permission_agent_{id(self)}"
        self.owner = ""
        self.unregistered = False
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def register(cls, answer: Callable[[AgentRequest], Awaitable[bool]], bus_address: str | None = None,
                       on_registered_again: Callable[[], None] | None = None) -> PermissionAgent:
        """Registers `answer` as the agent of this process's login session,
        on the system bus or at `bus_address`; `on_registered_again` is
        called each time it is registered with a restarted nearbyd. Raises
        NearbyError when nearbyd refuses it (another agent holds the
        session, or it is not running)."""
        bus = await (MessageBus(bus_address=bus_address) if bus_address else MessageBus(bus_type=BusType.SYSTEM)).connect()
        agent = cls(bus, answer, on_registered_again)
        bus.add_message_handler(agent._on_message)
        await agent._call(DBUS, "/org/freedesktop/DBus", DBUS, "AddMatch", "s",
                          [f"type='signal',sender='{DBUS}',member='NameOwnerChanged',arg0='{BUS_NAME}'"])
        agent.owner = await agent._call(DBUS, "/org/freedesktop/DBus", DBUS, "GetNameOwner", "s", [BUS_NAME])
        await agent._call(BUS_NAME, ROOT, NEARBY1, "RegisterPermissionAgent", "o", [agent.path])
        return agent

    async def unregister(self) -> None:
        """Stops answering: nearbyd falls back on its default policy."""
        if self.unregistered:
            return
        self.unregistered = True
        try:
            await self._call(BUS_NAME, ROOT, NEARBY1, "UnregisterPermissionAgent", "o", [self.path])
        finally:
            self.bus.disconnect()

    def _on_message(self, message: DBusMessage) -> DBusMessage | bool | None:
        if (message.message_type == MessageType.SIGNAL and message.sender == DBUS
                and message.member == "NameOwnerChanged" and message.body[0] == BUS_NAME):
            self.owner = message.body[2]
            if self.owner and not self.unregistered:
                self._spawn(self._register_again())
            return None
        if message.message_type != MessageType.METHOD_CALL or message.path != self.path:
            return None
        if message.sender != self.owner:
            return DBusMessage.new_error(message, "org.freedesktop.DBus.Error.AccessDenied", f"only nearbyd may call {self.path}")
        if message.interface != PERMISSION_AGENT1 or message.member != "RequestPermission" or message.signature != "sasa{sv}":
            return DBusMessage.new_error(message, "org.freedesktop.DBus.Error.UnknownMethod",
                                         f"{self.path} answers {PERMISSION_AGENT1}.RequestPermission(sasa{{sv}}) alone")
        app_id, mediums, details = message.body
        request = AgentRequest(app_id, list(mediums), {key: value.value for key, value in details.items()})

        async def reply() -> None:
            try:
                granted = bool(await self.answer(request))
                await self.bus.send(DBusMessage.new_method_return(message, "b", [granted]))
            except Exception as error:  # the prompt failed: nearbyd counts it as a no, for this request
                await self.bus.send(DBusMessage.new_error(message, "org.nearbyd.Error.Failed", f"the agent failed: {error}"))

        self._spawn(reply())
        return True

    async def _register_again(self) -> None:
        try:
            await self._call(BUS_NAME, ROOT, NEARBY1, "RegisterPermissionAgent", "o", [self.path])
        except NearbyError as error:
            logger.warning("nearbyd restarted, and registering the permission agent again failed: %s", error)
            return
        if self.on_registered_again:
            self.on_registered_again()

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, destination: str, path: str, interface: str, member: str, signature: str, body: list[Any]) -> Any:
        reply = await self.bus.call(DBusMessage(destination=destination, path=path, interface=interface, member=member,
                                                signature=signature, body=body))
        return MessageManager._answer(reply)
