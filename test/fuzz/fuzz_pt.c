// fuzz_pt.c: libFuzzer target for the .pt reader (io/pt.c, io/zip.c): the input is a whole file for
// pt_open; what opens is then looked up by name and converted with st_read_f32. Build and run: run.sh.
#include "io/pt.h"
#include "test/fuzz/fuzz_weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_weights(data, size, pt_open); }
