#include <malloc.h>

// nearbyd gives back what large messages took with malloc_trim, which trims
// the top of the main arena only: so every thread of nearbyd, the bus thread
// that reads the messages included, allocates there. Set before main and
// before any thread, as glibc fixes its limit of arenas at the first one it
// makes. Linked into the nearbyd executable alone.
__attribute__((constructor)) static void nearbyd_one_arena(void) {
    mallopt(M_ARENA_MAX, 1);
}
