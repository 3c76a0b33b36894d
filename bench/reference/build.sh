#!/usr/bin/env bash
# Builds the reference sd-bus service and load client from ../shared/bench/dbus-reference
# (read in place, not copied), and nearbyd's own load client and latency probe, into bench/reference/bin.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
reference=${NEARBY_DBUS_REFERENCE:-$here/../../../shared/bench/dbus-reference}
[ -f "$reference/bench.c" ] || { echo "build.sh: no reference programs at $reference (set NEARBY_DBUS_REFERENCE)" >&2; exit 1; }
mkdir -p "$here/bin"
flags=$(pkg-config --cflags --libs libsystemd)
gcc -O2 -o "$here/bin/bench" "$reference/bench.c" $flags
gcc -O2 -o "$here/bin/svc_sdbus" "$reference/svc_sdbus.c" $flags
gcc -O2 -Wall -o "$here/bin/pairs" "$here/pairs.c" $flags
gcc -O2 -Wall -o "$here/bin/scan_floor" "$here/scan_floor.c" $flags
gcc -O2 -Wall -o "$here/bin/latency_probe" "$here/latency_probe.c" $flags
