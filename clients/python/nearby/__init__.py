"""Nearby Messages for Linux, from Python: a client of nearbyd's D-Bus API
(doc/dbus-api.md) on asyncio and dbus-fast, in the shape of the Swift
library NearbyMessages.

    manager = await MessageManager.create(api_key)
    publication = await manager.publish(b"hello", type="chat")
    subscription = await manager.subscribe(type="chat", on_found=print, on_lost=print)
    ...
    await manager.release()

Signals are believed only from the connection that owns org.nearbyd now
(dbus-api.md, "Trusting signals"), and when nearbyd restarts the manager,
its publications and subscriptions are made again on the new one.
"""

from .client import (
    AgentRequest,
    Beacon,
    DaemonStatus,
    Message,
    MessageInfo,
    MessageManager,
    NearbyError,
    PermissionAgent,
    Publication,
    Strategy,
    Subscription,
    Upstream,
    status,
)

__all__ = ["AgentRequest", "Beacon", "DaemonStatus", "Message", "MessageInfo", "MessageManager", "NearbyError",
           "PermissionAgent", "Publication", "Strategy", "Subscription", "Upstream", "status"]
