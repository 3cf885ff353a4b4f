// How the CPU kernels enter OpenMP. A parallel region ends in a barrier whose last thread always
// wakes the others through a system call, even in a team of one thread, or one that an `if`
// clause keeps to the calling thread: about 1.4 us a region on a virtual machine, where a system
// call costs 1 us. Small steps make dozens of regions that should not be parallel (a decode row's
// norms, adds and rope; a small network's channels), so the helpers below run those on the
// calling thread without entering OpenMP at all.
#pragma once

#include <omp.h>

#include <cstdint>

namespace kiln::cpu {

// Whether to enter an OpenMP region: the work is worth splitting and there is more than one thread.
inline bool parallel_worthwhile(bool parallel) { return parallel && omp_get_max_threads() > 1; }

// Calls body() once on every OpenMP thread of a new region when `parallel` (and there is more than
// one thread), else once on the calling thread. Worksharing loops inside body (`#pragma omp for`)
// split their iterations among the region's threads, or run them all on the calling thread.
template <class Body>
void parallel_region(bool parallel, Body&& body) {
  if (parallel_worthwhile(parallel)) {
#pragma omp parallel
    body();
  } else {
    body();
  }
}

// body(i) for i in [begin, end): statically split over the OpenMP threads when `parallel`, else in
// order on the calling thread.
template <class Body>
void parallel_for(int64_t begin, int64_t end, bool parallel, Body&& body) {
  if (parallel_worthwhile(parallel)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = begin; i < end; ++i) body(i);
  } else {
    for (int64_t i = begin; i < end; ++i) body(i);
  }
}

}  // namespace kiln::cpu
