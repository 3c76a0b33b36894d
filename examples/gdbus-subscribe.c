/* An app written in C on GDBus: subscribes to the project's `chat` messages
 * through nearbyd and prints each one found and lost, until it has seen
 * COUNT events (or forever, without COUNT).
 *
 *   gdbus-subscribe API_KEY [BUS_ADDRESS [COUNT]]
 *
 * Build: gcc -o gdbus-subscribe gdbus-subscribe.c $(pkg-config --cflags --libs gio-2.0)
 *
 * The manager and its subscription live as long as this connection: nearbyd
 * ends them when it leaves the bus. Signals are subscribed to with the
 * sender "org.nearbyd": GDBus then delivers only those the name's current
 * owner sent, which is the check doc/dbus-api.md ("Trusting signals") asks
 * of every client. Without BUS_ADDRESS it uses the system bus.
 */
#include <gio/gio.h>
#include <stdio.h>
#include <stdlib.h>

static int remaining = -1;
static GMainLoop *loop;

static void on_signal(GDBusConnection *connection, const char *sender, const char *path, const char *interface,
                      const char *member, GVariant *parameters, gpointer user_data) {
    (void) connection, (void) sender, (void) path, (void) interface, (void) user_data;
    GVariant *content = NULL;
    const char *namespace = NULL, *type = NULL;
    g_variant_get(parameters, "(@ays&s@a{sv})", &content, &namespace, &type, NULL);
    gsize length = 0;
    const char *bytes = g_variant_get_fixed_array(content, &length, 1);
    printf("%s %s/%s '%.*s'\n", g_str_equal(member, "MessageFound") ? "found" : "lost", namespace, type, (int) length, bytes);
    fflush(stdout);
    g_variant_unref(content);
    if (remaining > 0 && --remaining == 0) g_main_loop_quit(loop);
}

/* Calls a method of nearbyd and returns the object path it answers, or exits saying why. */
static char *call_for_path(GDBusConnection *connection, const char *path, const char *interface, const char *method,
                           GVariant *arguments) {
    GError *error = NULL;
    GVariant *reply = g_dbus_connection_call_sync(connection, "org.nearbyd", path, interface, method, arguments,
                                                  G_VARIANT_TYPE("(o)"), G_DBUS_CALL_FLAGS_NONE, -1, NULL, &error);
    if (!reply) {
        fprintf(stderr, "gdbus-subscribe: %s failed: %s\n", method, error->message);
        exit(1);
    }
    char *result = NULL;
    g_variant_get(reply, "(o)", &result);
    g_variant_unref(reply);
    return result;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gdbus-subscribe API_KEY [BUS_ADDRESS [COUNT]]\n");
        return 64;
    }
    GError *error = NULL;
    GDBusConnection *connection = argc > 2
        ? g_dbus_connection_new_for_address_sync(argv[2], G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                                 G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL, &error)
        : g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
    if (!connection) {
        fprintf(stderr, "gdbus-subscribe: cannot connect to the bus: %s\n", error->message);
        return 1;
    }
    if (argc > 3) remaining = atoi(argv[3]);

    GVariantBuilder none;
    g_variant_builder_init(&none, G_VARIANT_TYPE("a{sv}"));
    char *manager = call_for_path(connection, "/org/nearbyd", "org.nearbyd.Nearby1", "CreateManager",
                                  g_variant_new("(sa{sv})", argv[1], &none));
    /* Subscribed before Subscribe, so nothing found at once is missed. */
    for (int i = 0; i < 2; i++) {
        g_dbus_connection_signal_subscribe(connection, "org.nearbyd", "org.nearbyd.Subscription1",
                                           i == 0 ? "MessageFound" : "MessageLost", NULL, NULL,
                                           G_DBUS_SIGNAL_FLAGS_NONE, on_signal, NULL, NULL);
    }
    GVariantBuilder params;
    g_variant_builder_init(&params, G_VARIANT_TYPE("a{sv}"));
    g_variant_builder_add(&params, "{sv}", "Type", g_variant_new_string("chat"));
    char *subscription = call_for_path(connection, manager, "org.nearbyd.Manager1", "Subscribe",
                                       g_variant_new("(a{sv})", &params));
    printf("subscribed %s\n", subscription);
    fflush(stdout);

    loop = g_main_loop_new(NULL, FALSE);
    g_main_loop_run(loop);
    g_free(subscription);
    g_free(manager);
    g_object_unref(connection);
    return 0;
}
