// fuzz_safetensors.c: libFuzzer target for the safetensors reader: the input is a whole file for
// st_open; what opens is then looked up by name and converted with st_read_f32. Build and run: run.sh.
#include "test/fuzz/fuzz_weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_weights(data, size, st_open); }
