#include "CSystemd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct nearby_vtable {
        size_t capacity;       /* member entries, excluding START and END */
        size_t used;
        char **strings;        /* every string handed to sd-bus, freed with the table */
        size_t n_strings;
        sd_bus_vtable *entries;
};

const uint64_t NEARBY_VTABLE_UNPRIVILEGED = SD_BUS_VTABLE_UNPRIVILEGED;
const uint64_t NEARBY_VTABLE_PROPERTY_CONST = SD_BUS_VTABLE_PROPERTY_CONST;
const uint64_t NEARBY_VTABLE_PROPERTY_EMITS_CHANGE = SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE;

nearby_vtable *nearby_vtable_new(size_t members) {
        nearby_vtable *vt = calloc(1, sizeof *vt);
        if (!vt)
                return NULL;
        vt->capacity = members;
        /* Up to four strings per member (member, signature, result, names). */
        vt->strings = calloc(members * 4 + 1, sizeof *vt->strings);
        vt->entries = calloc(members + 2, sizeof *vt->entries);
        if (!vt->strings || !vt->entries) {
                nearby_vtable_free(vt);
                return NULL;
        }
        const sd_bus_vtable start = SD_BUS_VTABLE_START(0);
        const sd_bus_vtable end = SD_BUS_VTABLE_END;
        vt->entries[0] = start;
        vt->entries[members + 1] = end;
        return vt;
}

void nearby_vtable_free(nearby_vtable *vt) {
        if (!vt)
                return;
        for (size_t i = 0; i < vt->n_strings; i++)
                free(vt->strings[i]);
        free(vt->strings);
        free(vt->entries);
        free(vt);
}

const sd_bus_vtable *nearby_vtable_array(const nearby_vtable *vt) {
        return vt->entries;
}

static const char *keep(nearby_vtable *vt, const char *s, size_t len) {
        char *copy = malloc(len + 1);
        if (!copy)
                return NULL;
        memcpy(copy, s, len);
        copy[len] = '\0';
        vt->strings[vt->n_strings++] = copy;
        return copy;
}

static const char *keep_str(nearby_vtable *vt, const char *s) {
        return keep(vt, s, strlen(s));
}

static sd_bus_vtable *next(nearby_vtable *vt) {
        if (vt->used >= vt->capacity)
                return NULL;
        return &vt->entries[1 + vt->used++];
}

int nearby_vtable_add_method(nearby_vtable *vt, const char *member, const char *signature,
                             const char *result, const char *names, size_t names_len,
                             sd_bus_message_handler_t handler, uint64_t flags) {
        sd_bus_vtable *e = next(vt);
        if (!e)
                return -ENOSPC;
        const sd_bus_vtable entry = SD_BUS_METHOD(
                keep_str(vt, member), keep_str(vt, signature), keep_str(vt, result), handler, flags);
        *e = entry;
        e->x.method.names = keep(vt, names, names_len);
        if (!e->x.method.member || !e->x.method.signature || !e->x.method.result || !e->x.method.names)
                return -ENOMEM;
        return 0;
}

int nearby_vtable_add_signal(nearby_vtable *vt, const char *member, const char *signature,
                             const char *names, size_t names_len, uint64_t flags) {
        sd_bus_vtable *e = next(vt);
        if (!e)
                return -ENOSPC;
        const sd_bus_vtable entry = SD_BUS_SIGNAL(keep_str(vt, member), keep_str(vt, signature), flags);
        *e = entry;
        e->x.signal.names = keep(vt, names, names_len);
        if (!e->x.signal.member || !e->x.signal.signature || !e->x.signal.names)
                return -ENOMEM;
        return 0;
}

int nearby_vtable_add_property(nearby_vtable *vt, const char *member, const char *signature,
                               sd_bus_property_get_t get, sd_bus_property_set_t set,
                               uint64_t flags) {
        sd_bus_vtable *e = next(vt);
        if (!e)
                return -ENOSPC;
        if (set) {
                const sd_bus_vtable entry = SD_BUS_WRITABLE_PROPERTY(
                        keep_str(vt, member), keep_str(vt, signature), get, set, 0, flags);
                *e = entry;
        } else {
                const sd_bus_vtable entry = SD_BUS_PROPERTY(
                        keep_str(vt, member), keep_str(vt, signature), get, 0, flags);
                *e = entry;
        }
        if (!e->x.property.member || !e->x.property.signature)
                return -ENOMEM;
        return 0;
}

int nearby_bus_error_set(sd_bus_error *e, const char *name, const char *message) {
        return sd_bus_error_set(e, name, message);
}
