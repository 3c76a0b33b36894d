#define _GNU_SOURCE
#include <pthread.h>

#include "CSystemd.h"

int nearby_name_thread(const char *name) {
        return pthread_setname_np(pthread_self(), name);
}
