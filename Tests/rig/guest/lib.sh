# Helpers for the rig's bash cases and harness: source "$RIG_LIB".
#
# Cases wait on conditions, never on fixed sleeps: rig_wait polls a command
# until it succeeds or a deadline passes.

# rig_wait SECONDS DESCRIPTION COMMAND [ARG...]
# Runs COMMAND (a program or a shell function) every 0.1 s until it succeeds.
# Returns 1, saying what it waited for, if SECONDS pass first.
rig_wait() {
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit))
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "rig_wait: gave up after ${limit}s waiting for $what" >&2
            return 1
        fi
        sleep 0.1
    done
}

# rig_adapter_prop hciN PROPERTY: one Adapter1 property of /org/bluez/hciN as
# plain text (booleans true/false, strings unquoted). Fails if bluetoothd or
# the adapter is not there.
rig_adapter_prop() {
    rig_bluez_prop "/org/bluez/$1" org.bluez.Adapter1 "$2"
}

# rig_bluez_prop OBJECT-PATH INTERFACE PROPERTY: a basic-typed property of a
# bluetoothd object as plain text.
rig_bluez_prop() {
    dbus-send --system --print-reply=literal --dest=org.bluez "$1" \
        org.freedesktop.DBus.Properties.Get string:"$2" string:"$3" 2>/dev/null |
        awk '{ $1 = ""; if ($2 ~ /^(boolean|string|byte|uint16|int16|uint32|int32|uint64|int64|double)$/) $2 = ""; sub(/^ +/, ""); print }'
    return "${PIPESTATUS[0]}"
}

# rig_fail MESSAGE: report why the case failed and exit 1.
rig_fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# rig_system_case FILE: whether the case is marked "# rig-boot: systemd", to
# run in the boot with systemd as PID 1 (guest/run-system-cases) rather than
# under /init (guest/run-cases).
rig_system_case() {
    grep -q '^# rig-boot: *systemd *$' "$1" 2>/dev/null
}

# rig_case_limit FILE: the case's time limit in seconds, from its
# "# rig-timeout: SECONDS" line; 180 without one.
rig_case_limit() {
    sed -n 's/^# rig-timeout: *\([0-9][0-9]*\).*/\1/p' "$1" | head -n1 | grep . || echo 180
}

# rig_list_cases CASES-DIR REQUEST-FILE init|systemd: the cases of that boot,
# those named in the request file (one a line) if it has any, else every
# executable in CASES-DIR, in name order.
rig_list_cases() {
    local dir=$1 request=$2 boot=$3 f name
    if [ -s "$request" ]; then
        while read -r name; do
            [ -z "$name" ] || echo "$dir/$name"
        done <"$request"
    else
        for f in "$dir"/*; do
            if [ -f "$f" ] && [ -x "$f" ]; then echo "$f"; fi
        done
    fi | while read -r f; do
        kind=init
        ! rig_system_case "$f" || kind=systemd
        [ "$kind" != "$boot" ] || basename "$f"
    done
}

# The harnesses' messages, with the guest's uptime; RIG_HARNESS names which.
rig_uptime() { cut -d' ' -f1 /proc/uptime; }
rig_say() { echo "${RIG_HARNESS:-rig} [$(rig_uptime)s] $*"; }

# Both controllers published by bluetoothd (it has read them from the
# kernel). dbus-send, not busctl tree, which takes ~18 s under TCG.
rig_adapters_published() { rig_adapter_prop hci0 Address >/dev/null && rig_adapter_prop hci1 Address >/dev/null; }

# Power both controllers on; true once both say Powered. bluetoothd may be
# powering them itself (AutoEnable) and then answers Busy, so poll this with
# rig_wait.
rig_adapters_powered() {
    local hci ok=0
    for hci in hci0 hci1; do
        [ "$(rig_adapter_prop $hci Powered)" = true ] && continue
        ok=1
        dbus-send --system --print-reply --dest=org.bluez /org/bluez/$hci org.freedesktop.DBus.Properties.Set \
            string:org.bluez.Adapter1 string:Powered variant:boolean:true >/dev/null 2>&1 || true
    done
    return "$ok"
}

# rig_run_case NAME FILE LOG RESULTS [VARIABLE=VALUE...]: runs one case with
# its time limit, its output to LOG and the variables in its environment (and
# RIG_CASE, RIG_SCRATCH: a fresh directory of its own), kills whatever it left
# in its process group, and appends "PASS|FAIL NAME SECONDS [reason]" to
# RESULTS. Returns 0 when it passed.
rig_run_case() {
    local name=$1 file=$2 log=$3 results=$4
    shift 4
    if [ ! -x "$file" ]; then
        rig_say "FAIL $name: no executable case $file"
        echo "FAIL $name 0 no-such-case" >>"$results"
        return 1
    fi
    local limit scratch=/tmp/rig-scratch/$name t0 t1 took rc=0
    limit=$(rig_case_limit "$file")
    rm -rf "$scratch"
    mkdir -p "$scratch"
    chmod 0755 "$scratch"
    rig_say "run $name (timeout ${limit}s)"
    t0=$(rig_uptime)
    # timeout puts the case in its own process group; whatever the case leaves
    # behind in it is killed below, so the next case starts clean.
    env RIG_CASE="$name" RIG_SCRATCH="$scratch" "$@" \
        timeout --kill-after=10 "$limit" "$file" >"$log" 2>&1 </dev/null &
    local tpid=$!
    wait "$tpid" || rc=$?
    kill -KILL -- "-$tpid" 2>/dev/null || true
    t1=$(rig_uptime)
    took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" = 0 ]; then
        rig_say "PASS $name (${took}s)"
        echo "PASS $name $took" >>"$results"
        return 0
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        rig_say "FAIL $name: timed out after ${limit}s"
        echo "FAIL $name $took timeout" >>"$results"
    else
        rig_say "FAIL $name: exit $rc (${took}s)"
        echo "FAIL $name $took exit-$rc" >>"$results"
    fi
    return 1
}
