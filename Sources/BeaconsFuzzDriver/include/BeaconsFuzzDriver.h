// libFuzzer's C entry for programs that own main(). SwiftPM renames an
// executable's main (to link it into tests), which hides libFuzzer's own
// main, so the fuzz executable's Swift main calls this driver instead.
// Only referenced when built with -DBEACONS_LIBFUZZER and -sanitize=fuzzer.
#ifndef BEACONS_FUZZ_DRIVER_H
#define BEACONS_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv,
                        int (*callback)(const uint8_t *data, size_t size));

#endif
