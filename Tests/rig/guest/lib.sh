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
