// When each request of a serving benchmark is sent: offsets in seconds from the start of the run.
// Open-loop arrivals as vLLM's serving benchmark draws them: the gaps between requests follow a
// gamma distribution with shape `burstiness` and mean 1/rate, so burstiness 1 is a Poisson
// process, below 1 burstier, above 1 more even. A rate of infinity sends every request at once
// (the closed-loop case, where --max-concurrency alone paces the run). Pure function of its
// arguments; the caller owns the returned vector.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace kiln::cli::bench_serve {

// Non-decreasing offsets, the first one at the first gap (not at zero) as a Poisson process has it.
// rate must be > 0 (or +inf), burstiness > 0, n >= 0.
Expected<std::vector<double>> arrival_schedule(int64_t n, double rate, double burstiness, uint64_t seed);

}  // namespace kiln::cli::bench_serve
