#!/usr/bin/python3
"""A device that floods its direct channel and never reads, as a hostile
device would: registers with the API key, opens
/v1/devices/{device}/channel (a WebSocket, written by hand on a raw socket)
and sends upstream messages whose `to` is TO_BYTES long (the server refuses
each, in words) until TOTAL_MIB have gone or the server closes. Never reads
a byte of the answers. Prints one JSON line: bytes sent, and whether the
server closed.

  channel_flood.py SERVER_URL API_KEY TO_BYTES TOTAL_MIB
"""
import json
import os
import socket
import struct
import sys
import urllib.request
from urllib.parse import urlparse


def register(server, api_key):
    request = urllib.request.Request(server + "/v1/devices", method="POST", headers={"X-Api-Key": api_key})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def frame(text):
    """A masked text frame; the mask key is zero, so the payload goes as it is."""
    payload = text.encode()
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
    else:
        header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
    return header + b"\0\0\0\0" + payload


def main(server, api_key, to_bytes, total_mib):
    device = register(server, api_key)
    url = urlparse(server)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    sock.sendall((f"GET /v1/devices/{device['device']}/channel HTTP/1.1\r\nHost: {url.netloc}\r\n"
                  f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {device['secret']}\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    if b" 101 " not in answer.split(b"\r\n")[0]:
        print(json.dumps({"error": answer.decode(errors="replace")}), flush=True)
        return
    to = "x" * (int(to_bytes) - len("@nearby.local")) + "@nearby.local"
    sent, closed, index = 0, False, 0
    while sent < int(total_mib) << 20:
        index += 1
        message = {"op": "send", "message": {"app": "a", "messageId": f"m{index}", "to": to, "data": {}, "expiresAtMs": 0}}
        try:
            data = frame(json.dumps(message))
            sock.sendall(data)
            sent += len(data)
        except OSError:
            closed = True
            break
    print(json.dumps({"sent": sent, "closed": closed}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
