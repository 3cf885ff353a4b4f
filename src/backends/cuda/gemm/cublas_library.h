// cuBLAS and cuBLASLt, loaded when the CUDA backend first needs them rather than when the program
// starts. Linked in the usual way, the two libraries (over 600 MB) are mapped and relocated by the
// dynamic loader at every start of `kiln`, about 0.35 s and 230 MB of memory even for `kiln --help`
// or a CPU engine. cublas_library.cpp instead defines the entry points the backend calls, with the
// headers' own signatures; each forwards to the library, which is opened (dlopen) on the first
// call. Internal to backends/cuda.
#pragma once

#include "base/status.h"

namespace kiln::cuda {

// Opens cuBLAS and cuBLASLt once (later calls return the first answer). Searches as the dynamic
// loader would (LD_LIBRARY_PATH, the system's libraries), then the toolkit's library folder of
// the build. An error names the library and why it could not be opened. The backend calls this
// before its first cuBLAS call, so that a missing library is reported as such; an entry point
// called without it answers CUBLAS_STATUS_NOT_INITIALIZED.
Status load_cublas();

}  // namespace kiln::cuda
