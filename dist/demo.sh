#!/usr/bin/env bash
# The walking skeleton, on one host: two simulated devices, each with its own
# private D-Bus and nearbyd, in one nearby-air space, and one nearby-server.
# A publishes, B finds the message; A moves out of range, B loses it.
#
# Usage: dist/demo.sh [BIN_DIR]   (default: .build/debug; `make demo` builds first)
set -euo pipefail

bin=${1:-.build/debug}
for program in nearbyd nearby-server nearby-air nearbyctl; do
    [ -x "$bin/$program" ] || { echo "demo: $bin/$program is missing; run 'make demo' or 'swift build' first" >&2; exit 1; }
done
bin=$(cd "$bin" && pwd)
work=$(mktemp -d /tmp/nearbyd-demo.XXXXXX)
pids=()

cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Waits until FILE has a line matching PATTERN (at most 30 s) and prints it.
await_line() {
    local file=$1 pattern=$2
    if ! timeout 30 grep -m1 -E "$pattern" <(tail -n +1 -f "$file"); then
        echo "demo: gave up waiting for '$pattern' in $file" >&2
        exit 1
    fi
}

start() {  # NAME COMMAND... : runs in the background, output in $work/NAME.log
    local name=$1; shift
    : >"$work/$name.log"  # exists before anyone waits on it
    "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
}

say "Two private buses, one per device"
for device in A B; do
    cat >"$work/bus-$device.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=$work/bus-$device</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
</busconfig>
CONF
    start "bus-$device" dbus-daemon --config-file="$work/bus-$device.conf" --nofork --print-address=1
    await_line "$work/bus-$device.log" '^unix:'
done

say "nearby-server with a fresh SQLite database, and a project"
start server "$bin/nearby-server" serve --listen 127.0.0.1:0 --database "$work/server.sqlite"
url=$(await_line "$work/server.log" 'listening on http://' | sed 's/.*listening on //')
echo "server: $url"
key=$("$bin/nearby-server" project create demo --database "$work/server.sqlite" --json |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["apiKey"])')
echo "project 'demo', API key $key"

say "nearby-air, and a nearbyd per device: A at (0, 0), B at (2, 0)"
start air "$bin/nearby-air" serve --socket "$work/air.sock"
await_line "$work/air.log" 'listening on'
# Nobody sits at these devices to answer a permission dialog: apps are granted
# (the kiosk setting), and the host's logind is not theirs to follow.
cat >"$work/nearbyd.conf" <<CONF
[daemon]
logind-bus = "none"
[permissions]
default-policy = "grant"
CONF
start nearbyd-A "$bin/nearbyd" --bus "unix:path=$work/bus-A" --config "$work/nearbyd.conf" --server "$url" \
    --state-dir "$work/state-A" --ble sim --air-socket "$work/air.sock" --device-name A --position 0,0
start nearbyd-B "$bin/nearbyd" --bus "unix:path=$work/bus-B" --config "$work/nearbyd.conf" --server "$url" \
    --state-dir "$work/state-B" --ble sim --air-socket "$work/air.sock" --device-name B --position 2,0
await_line "$work/nearbyd-A.log" 'nearbyd: ready'
await_line "$work/nearbyd-B.log" 'nearbyd: ready'

say "B subscribes to 'chat' messages"
start subscriber "$bin/nearbyctl" subscribe --bus "unix:path=$work/bus-B" --api-key "$key" --type chat
await_line "$work/subscriber.log" '^subscribed'

say "A publishes 'Hello from A'"
start publisher "$bin/nearbyctl" publish --bus "unix:path=$work/bus-A" --api-key "$key" --type chat 'Hello from A'
await_line "$work/publisher.log" '^published'
printf 'B: '; await_line "$work/subscriber.log" '^found'

say "A moves 100 m away"
"$bin/nearby-air" move --socket "$work/air.sock" A 100 0
printf 'B: '; await_line "$work/subscriber.log" '^lost'

say "Done: found when near, lost when apart"
