#include <malloc.h>

// glibc gives each thread that meets contention an arena of its own, up to
// eight per core, and keeps what is freed in each for that arena's threads:
// after a burst, memory freed on one thread's arena stays resident though
// another's is in use. nearbyd and nearby-server run few threads that
// allocate (tcache spares most small allocations the lock), so they use one
// arena: nearby-server's resident memory after the soak's churn came back
// within 7 % of its baseline (8 % with two arenas, 12 % with glibc's
// default; doc/performance.md, "Churn and soak"); and
// nearbyd gives back what large messages took with malloc_trim, which trims
// the top of the main arena. Set before main and before any thread, as glibc
// fixes its limit of arenas when it makes its first. Linked into the nearbyd
// and nearby-server executables only: a library must not choose for its host.
__attribute__((constructor)) static void one_malloc_arena(void) {
    mallopt(M_ARENA_MAX, 1);
}
