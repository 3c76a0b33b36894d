#ifndef NEARBYD_CSYSTEMD_H
#define NEARBYD_CSYSTEMD_H

#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include <systemd/sd-journal.h>
#include <sys/eventfd.h>
#include <sys/uio.h>

/*
 * Run-time builder for sd_bus_vtable arrays. The SD_BUS_* initialiser macros and
 * the vtable's bit-fields do not import into Swift, so Swift describes an
 * interface and this file lays out the array.
 *
 * Every string is copied and owned by the vtable; sd-bus keeps pointers into the
 * array for as long as any object is registered with it, so free it only after
 * the last registration that uses it is gone.
 */
typedef struct nearby_vtable nearby_vtable;

/* Allocates a vtable with room for `members` entries between START and END. */
nearby_vtable *nearby_vtable_new(size_t members);
void nearby_vtable_free(nearby_vtable *vt);
/* The array to hand to sd_bus_add_object_vtable. */
const sd_bus_vtable *nearby_vtable_array(const nearby_vtable *vt);

/*
 * `names` lists the argument names, each terminated by '\0' (inputs, then
 * outputs), as SD_BUS_PARAM builds them; `names_len` counts every byte.
 */
int nearby_vtable_add_method(nearby_vtable *vt, const char *member, const char *signature,
                             const char *result, const char *names, size_t names_len,
                             sd_bus_message_handler_t handler, uint64_t flags);
int nearby_vtable_add_signal(nearby_vtable *vt, const char *member, const char *signature,
                             const char *names, size_t names_len, uint64_t flags);
int nearby_vtable_add_property(nearby_vtable *vt, const char *member, const char *signature,
                               sd_bus_property_get_t get, sd_bus_property_set_t set,
                               uint64_t flags);

/* sd_bus_error_set with a plain message (sd_bus_error_setf is variadic). */
int nearby_bus_error_set(sd_bus_error *e, const char *name, const char *message);

/* Names the calling thread (pthread_setname_np is a GNU extension Swift does not see). */
int nearby_name_thread(const char *name);

/* Flag values, as Swift cannot see the anonymous enums' 64-bit members reliably. */
extern const uint64_t NEARBY_VTABLE_UNPRIVILEGED;
extern const uint64_t NEARBY_VTABLE_PROPERTY_CONST;
extern const uint64_t NEARBY_VTABLE_PROPERTY_EMITS_CHANGE;

#endif
