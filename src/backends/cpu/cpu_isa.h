// Instruction-set selection for the CPU backend. The library is compiled for baseline x86-64;
// kernels that need AVX2 or AVX-512 carry their own target attributes and are only called after
// isa_active() says the CPU (and the OS, which must save the wider registers) supports them.
//
// isa_active() is process-wide state: it is isa_detect(), unless the environment variable
// KILN_CPU_ISA (scalar|avx2|avx512|avx512bf16) or isa_override() asks for a lower ISA. Tests and
// `kiln ... --isa` use the override; it is not meant to change while kernels run.
#pragma once

#include <optional>
#include <string_view>

#include "base/status.h"

namespace kiln::cpu {

// Ordered: a higher ISA can run every kernel of a lower one.
enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Bf16 };

// kAvx2 needs AVX2 + FMA + F16C; kAvx512 needs AVX-512 F/BW/VL/DQ + VNNI (Cascade Lake, Zen 4
// and later) and an OS that saves the ZMM state; kAvx512Bf16 adds AVX512_BF16's bf16 dot
// products (Cooper Lake, Sapphire Rapids, Zen 4 and later).
Isa isa_detect();

// The ISA kernels use: the override if set, else KILN_CPU_ISA if set and supported (an
// unsupported or misspelt value is ignored with a warning on stderr, once), else isa_detect().
Isa isa_active();

// Forces isa_active() to `isa` (nullopt: back to the default). Fails, changing nothing, when
// the CPU lacks `isa`.
Status isa_override(std::optional<Isa> isa);

std::string_view isa_name(Isa isa);  // "scalar", "avx2", "avx512", "avx512bf16"
std::optional<Isa> isa_from_name(std::string_view name);

}  // namespace kiln::cpu
