// How long one client waits for its answers, for `nearby-bench isolation`:
// Properties.Get of nearbyd's Version, then the reference service's
// Register (svc_sdbus, ../shared/bench/dbus-reference), one call at a time,
// a pair every INTERVAL_US microseconds (at once when the last pair was
// late), for SECONDS, on the bus of DBUS_SESSION_BUS_ADDRESS.
//
//   latency_probe SECONDS INTERVAL_US REFERENCE_NAME
//
// Prints each round trip in microseconds, send to reply read:
//   nearbyd US US ...
//   reference US US ...
//   errors N      (calls answered with an error; their times are included)
#include <systemd/sd-bus.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static sd_bus *bus;
static long errors;
static const unsigned long long call_timeout_us = 30ULL * 1000000ULL;

// Sends `m` and waits for its answer; the round trip in microseconds.
static long round_trip(sd_bus_message *m) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    long long start = now_ns();
    int r = sd_bus_call(bus, m, call_timeout_us, &error, &reply);
    long long end = now_ns();
    if (r < 0) errors++;
    sd_bus_error_free(&error);
    sd_bus_message_unref(reply);
    sd_bus_message_unref(m);
    return (long)((end - start) / 1000);
}

static long probe_nearbyd(void) {
    sd_bus_message *m = NULL;
    int r = sd_bus_message_new_method_call(bus, &m, "org.nearbyd", "/org/nearbyd",
                                           "org.freedesktop.DBus.Properties", "Get");
    if (r >= 0) r = sd_bus_message_append(m, "ss", "org.nearbyd.Nearby1", "Version");
    if (r < 0) { fprintf(stderr, "building Get: %s\n", strerror(-r)); exit(1); }
    return round_trip(m);
}

static long probe_reference(const char *name) {
    static const unsigned char key[16];
    sd_bus_message *m = NULL;
    int r = sd_bus_message_new_method_call(bus, &m, name, "/probe", "probe.Svc", "Register");
    if (r >= 0) r = sd_bus_message_append_array(m, 'y', key, sizeof key);
    if (r >= 0) r = sd_bus_message_append(m, "ss", "probe", "probe");
    if (r < 0) { fprintf(stderr, "building Register: %s\n", strerror(-r)); exit(1); }
    return round_trip(m);
}

static void print(const char *label, const long *values, size_t count) {
    printf("%s", label);
    for (size_t i = 0; i < count; i++) printf(" %ld", values[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: latency_probe SECONDS INTERVAL_US REFERENCE_NAME\n"); return 2; }
    double seconds = atof(argv[1]);
    long long interval = atoll(argv[2]) * 1000LL;
    const char *reference = argv[3];
    int r = sd_bus_open_user(&bus);
    if (r < 0) { fprintf(stderr, "open: %s\n", strerror(-r)); return 1; }
    size_t capacity = (size_t)(seconds * 1e9 / (double)(interval > 0 ? interval : 1)) + 16, count = 0;
    long *ours = calloc(capacity, sizeof *ours), *theirs = calloc(capacity, sizeof *theirs);
    if (!ours || !theirs) { fprintf(stderr, "out of memory\n"); return 1; }
    long long start = now_ns(), end = start + (long long)(seconds * 1e9), next = start;
    while (count < capacity && now_ns() < end) {
        struct timespec at = { .tv_sec = next / 1000000000LL, .tv_nsec = next % 1000000000LL };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {}
        ours[count] = probe_nearbyd();
        theirs[count] = probe_reference(reference);
        count++;
        next += interval;
        long long now = now_ns();
        if (next < now) next = now;
    }
    print("nearbyd", ours, count);
    print("reference", theirs, count);
    printf("errors %ld\n", errors);
    sd_bus_unref(bus);
    return 0;
}
