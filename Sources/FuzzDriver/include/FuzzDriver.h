// libFuzzer's C entry for programs that own main(). SwiftPM renames an
// executable's main (to link it into tests), which hides libFuzzer's own
// main, so each fuzz harness's Swift main calls this driver instead
// (beacons-fuzz, xmpp-fuzz, ccs-fuzz). Only referenced when a harness is
// built with its -D…_LIBFUZZER flag and -sanitize=fuzzer.
#ifndef FUZZ_DRIVER_H
#define FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv,
                        int (*callback)(const uint8_t *data, size_t size));

#endif
