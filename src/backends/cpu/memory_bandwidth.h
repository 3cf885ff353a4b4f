// Measures the memory read bandwidth the CPU kernels can reach: the ceiling for decode, which
// streams every weight once per token. Used by `kiln bench` to report the fraction reached.
#pragma once

#include <cstddef>

namespace kiln::cpu {

// Reads a `bytes`-sized buffer (made once, larger than the caches) `repeats` times with the
// current thread count; returns the best pass's bytes per second.
double measure_read_bandwidth(size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace kiln::cpu
