// Names the calling thread (as `top -H`, `perf` and /proc/PID/task/*/comm show it), so that the
// server's network threads and the loop thread (with the OpenMP workers it starts, which inherit
// its name) can be told apart when their CPU time is measured. Linux truncates names to 15 bytes.
#pragma once

namespace kiln {

void set_current_thread_name(const char* name);

}  // namespace kiln
