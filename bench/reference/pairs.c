// Load client for nearbyd: Publish+Unpublish pairs on one manager, W pairs in
// flight. The same shape of client as ../shared/bench/dbus-reference/bench.c
// (sd-bus, async calls, one thread), so the two services are measured alike.
//
//   pairs N W [CONTENT_BYTES]    on $DBUS_SESSION_BUS_ADDRESS, with the API key in
//                                 $NEARBY_API_KEY (default "bench-key")
#include <systemd/sd-bus.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static sd_bus *bus;
static const char *manager;
static uint8_t content[102400];
static size_t content_size = 32, done_pairs, errors, inflight, started;
static double *latency, *pair_start;

static double now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpu_us(void) {
        struct rusage u;
        getrusage(RUSAGE_SELF, &u);
        return u.ru_utime.tv_sec * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_sec * 1e6 + u.ru_stime.tv_usec;
}

static int compare(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static int on_unpublished(sd_bus_message *m, void *userdata, sd_bus_error *e) {
        size_t i = (size_t) (uintptr_t) userdata;
        if (sd_bus_message_is_method_error(m, NULL) && errors++ < 3)
                fprintf(stderr, "Unpublish: %s\n", sd_bus_message_get_error(m)->message);
        latency[i] = now_us() - pair_start[i];
        done_pairs++;
        inflight--;
        return 0;
}

static int on_published(sd_bus_message *m, void *userdata, sd_bus_error *e) {
        const char *path;
        if (sd_bus_message_is_method_error(m, NULL) || sd_bus_message_read_basic(m, 'o', &path) < 0) {
                if (errors++ < 3)
                        fprintf(stderr, "Publish: %s\n", sd_bus_message_get_error(m) ? sd_bus_message_get_error(m)->message : "bad reply");
                done_pairs++;
                inflight--;
                return 0;
        }
        sd_bus_message *call;
        if (sd_bus_message_new_method_call(bus, &call, "org.nearbyd", path, "org.nearbyd.Publication1", "Unpublish") < 0 ||
            sd_bus_call_async(bus, NULL, call, on_unpublished, userdata, 0) < 0) {
                fprintf(stderr, "cannot send Unpublish\n");
                exit(1);
        }
        sd_bus_message_unref(call);
        return 0;
}

static void publish(size_t i) {
        sd_bus_message *call;
        int r = sd_bus_message_new_method_call(bus, &call, "org.nearbyd", manager, "org.nearbyd.Manager1", "Publish");
        if (r >= 0) r = sd_bus_message_append_array(call, 'y', content, content_size);
        if (r >= 0) r = sd_bus_message_append_basic(call, 's', "bench");
        if (r >= 0) r = sd_bus_message_open_container(call, 'a', "{sv}");
        if (r >= 0) r = sd_bus_message_close_container(call);
        if (r >= 0) r = sd_bus_call_async(bus, NULL, call, on_published, (void *) (uintptr_t) i, 0);
        if (r < 0) {
                fprintf(stderr, "cannot send Publish: %s\n", strerror(-r));
                exit(1);
        }
        sd_bus_message_unref(call);
        pair_start[i] = now_us();
}

int main(int argc, char **argv) {
        if (argc < 3) {
                fprintf(stderr, "usage: pairs N W [CONTENT_BYTES]\n");
                return 2;
        }
        size_t n = strtoul(argv[1], NULL, 10), w = strtoul(argv[2], NULL, 10);
        if (argc > 3) content_size = strtoul(argv[3], NULL, 10);
        if (content_size < 1 || content_size > sizeof content || n == 0 || w == 0) return 2;
        int r = sd_bus_open_user(&bus);
        if (r < 0) {
                fprintf(stderr, "open: %s\n", strerror(-r));
                return 1;
        }
        sd_bus_message *call, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message_new_method_call(bus, &call, "org.nearbyd", "/org/nearbyd", "org.nearbyd.Nearby1", "CreateManager");
        const char *key = getenv("NEARBY_API_KEY");
        sd_bus_message_append_basic(call, 's', key && *key ? key : "bench-key");
        sd_bus_message_open_container(call, 'a', "{sv}");
        sd_bus_message_close_container(call);
        if ((r = sd_bus_call(bus, call, 0, &error, &reply)) < 0 || sd_bus_message_read_basic(reply, 'o', &manager) < 0) {
                fprintf(stderr, "CreateManager: %s\n", error.message ? error.message : strerror(-r));
                return 1;
        }
        latency = calloc(n, sizeof *latency);
        pair_start = calloc(n, sizeof *pair_start);
        double t0 = now_us(), cpu0 = cpu_us();
        while (done_pairs < n) {
                while (inflight < w && started < n) {
                        publish(started++);
                        inflight++;
                }
                r = sd_bus_process(bus, NULL);
                if (r < 0) {
                        fprintf(stderr, "process: %s\n", strerror(-r));
                        return 1;
                }
                if (r == 0) sd_bus_wait(bus, UINT64_MAX);
        }
        double elapsed = now_us() - t0;
        qsort(latency, n, sizeof *latency, compare);
        printf("nearbyd pairs w=%zu n=%zu pairs/s=%.0f calls/s=%.0f p50=%.1fus p99=%.1fus err=%zu clientcpu=%.1fus/call\n",
               w, n, n / (elapsed / 1e6), 2 * n / (elapsed / 1e6), latency[(size_t) (0.5 * (n - 1))],
               latency[(size_t) (0.99 * (n - 1))], errors, (cpu_us() - cpu0) / (2.0 * n));
        return errors ? 1 : 0;
}
