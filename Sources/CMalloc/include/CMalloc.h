// glibc's malloc statistics and trimming (mallinfo2, malloc_trim), which the Glibc module does not export.
#include <malloc.h>
