// Compiling a whole file's kernels for one instruction set: the library is built for baseline
// x86-64, and a kernel file for AVX2 or AVX-512 puts its functions between
//   KILN_ISA_TARGET_BEGIN(KILN_ISA_FEATURES_AVX2)
//   ...
//   KILN_ISA_TARGET_END()
// after its last #include, so that only its own functions (not the headers') get the target.
// GCC spells this `#pragma GCC push_options` + `#pragma GCC target(...)` ... `pop_options`,
// clang `#pragma clang attribute push(__attribute__((target(...))), apply_to = function)` ...
// `pop`; these macros write the one the compiler understands. Such a file's functions may only be
// called after isa_active() (cpu_isa.h) reports the matching Isa, and the file must not share a
// unity-build batch with others (kiln_backends_cpu is built per file for this reason).
#pragma once

// The feature sets of the Isa levels, as cpu_isa.h's isa_detect() checks them.
#define KILN_ISA_FEATURES_AVX2 "avx2,fma,f16c"
#define KILN_ISA_FEATURES_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define KILN_ISA_FEATURES_AVX512BF16 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c"

// _Pragma takes one string literal; stringizing the tokens writes it, quotes escaped.
#define KILN_ISA_PRAGMA(tokens) _Pragma(#tokens)

#if defined(__clang__)
#define KILN_ISA_TARGET_BEGIN(features) \
  KILN_ISA_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define KILN_ISA_TARGET_END() KILN_ISA_PRAGMA(clang attribute pop)
#else
#define KILN_ISA_TARGET_BEGIN(features) KILN_ISA_PRAGMA(GCC push_options) KILN_ISA_PRAGMA(GCC target(features))
#define KILN_ISA_TARGET_END() KILN_ISA_PRAGMA(GCC pop_options)
#endif
