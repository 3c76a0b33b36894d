/*
 * The cheapest possible BLE scan consumer, for nearby-bench scan: subscribes to
 * bluetoothd's PropertiesChanged signals on the bus of DBUS_SESSION_BUS_ADDRESS
 * and, for each, finds Device1's ServiceData entry under nearbyd's service UUID
 * and checks it is a token (8 bytes). It does what nearbyd's BlueZ backend must
 * do with each report and nothing else; nearbyd's CPU per report is measured
 * against it in the same run.
 *
 * Prints "listening" once the match is installed and, on SIGTERM, the number of
 * tokens it read.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

static const char *service_uuid = "9a6bac06-7789-4cd3-b56f-cdcc43b8183b";
static unsigned long tokens;

static int read_service_data(sd_bus_message *m) {
    int r = sd_bus_message_enter_container(m, 'a', "{sv}");
    if (r < 0) return r;
    while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
        const char *uuid;
        if ((r = sd_bus_message_read(m, "s", &uuid)) < 0) return r;
        if (strcmp(uuid, service_uuid) == 0) {
            const void *bytes;
            size_t size;
            if ((r = sd_bus_message_enter_container(m, 'v', "ay")) < 0) return r;
            if ((r = sd_bus_message_read_array(m, 'y', &bytes, &size)) < 0) return r;
            if (size == 8) tokens++;
            if ((r = sd_bus_message_exit_container(m)) < 0) return r;
        } else if ((r = sd_bus_message_skip(m, "v")) < 0) {
            return r;
        }
        if ((r = sd_bus_message_exit_container(m)) < 0) return r;
    }
    return r < 0 ? r : sd_bus_message_exit_container(m);
}

static int changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
    (void)userdata;
    (void)error;
    const char *interface;
    if (sd_bus_message_read(m, "s", &interface) < 0 || strcmp(interface, "org.bluez.Device1") != 0) return 0;
    if (sd_bus_message_enter_container(m, 'a', "{sv}") < 0) return 0;
    while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
        const char *name;
        if (sd_bus_message_read(m, "s", &name) < 0) return 0;
        if (strcmp(name, "ServiceData") == 0) {
            if (sd_bus_message_enter_container(m, 'v', "a{sv}") < 0 || read_service_data(m) < 0 ||
                sd_bus_message_exit_container(m) < 0)
                return 0;
        } else if (sd_bus_message_skip(m, "v") < 0) {
            return 0;
        }
        if (sd_bus_message_exit_container(m) < 0) return 0;
    }
    return 0;
}

static int terminate(sd_event_source *source, const struct signalfd_siginfo *info, void *userdata) {
    (void)info;
    (void)userdata;
    printf("tokens %lu\n", tokens);
    fflush(stdout);
    return sd_event_exit(sd_event_source_get_event(source), 0);
}

int main(void) {
    sd_bus *bus = NULL;
    sd_event *event = NULL;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    if (sd_bus_open_user(&bus) < 0 || sd_event_default(&event) < 0) {
        fprintf(stderr, "scan_floor: cannot connect to DBUS_SESSION_BUS_ADDRESS\n");
        return 1;
    }
    sd_event_add_signal(event, NULL, SIGTERM, terminate, NULL);
    if (sd_bus_add_match(bus, NULL,
                         "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',"
                         "member='PropertiesChanged',path_namespace='/org/bluez'",
                         changed, NULL) < 0) {
        fprintf(stderr, "scan_floor: cannot add the match\n");
        return 1;
    }
    sd_bus_attach_event(bus, event, 0);
    printf("listening\n");
    fflush(stdout);
    int r = sd_event_loop(event);
    sd_bus_flush_close_unref(bus);
    sd_event_unref(event);
    return r < 0 ? 1 : 0;
}
