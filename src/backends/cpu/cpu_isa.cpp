#include "backends/cpu/cpu_isa.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KILN_X86 1
#endif

namespace kiln::cpu {
namespace {

#if defined(KILN_X86)
struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(uint32_t leaf, uint32_t subleaf) {
  CpuidRegs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

// XCR0: which register states the OS saves on a context switch.
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t reg, int b) { return ((reg >> b) & 1u) != 0; }

Isa detect_x86() {
  if (__get_cpuid_max(0, nullptr) < 7) return Isa::kScalar;
  const CpuidRegs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.ecx, 27);
  if (!osxsave) return Isa::kScalar;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM0-15 high + ZMM16-31
  const bool fma = bit(l1.ecx, 12), avx = bit(l1.ecx, 28), f16c = bit(l1.ecx, 29);
  const CpuidRegs l7 = cpuid(7, 0);
  const bool avx2 = bit(l7.ebx, 5);
  const bool avx512f = bit(l7.ebx, 16), avx512dq = bit(l7.ebx, 17), avx512bw = bit(l7.ebx, 30),
             avx512vl = bit(l7.ebx, 31), avx512vnni = bit(l7.ecx, 11);
  if (!(os_ymm && avx && avx2 && fma && f16c)) return Isa::kScalar;
  if (!(os_zmm && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni)) return Isa::kAvx2;
  const bool avx512bf16 = bit(cpuid(7, 1).eax, 5);
  return avx512bf16 ? Isa::kAvx512Bf16 : Isa::kAvx512;
}
#endif

// -1: no override; otherwise the Isa value.
std::atomic<int> g_override{-1};

Isa env_or_detected() {
  static const Isa isa = [] {
    const Isa detected = isa_detect();
    const char* env = std::getenv("KILN_CPU_ISA");
    if (env == nullptr || *env == '\0') return detected;
    const std::optional<Isa> wanted = isa_from_name(env);
    if (!wanted) {
      std::fprintf(stderr, "kiln: ignoring KILN_CPU_ISA=%s (expected scalar, avx2, avx512 or avx512bf16)\n", env);
      return detected;
    }
    if (*wanted > detected) {
      std::fprintf(stderr, "kiln: ignoring KILN_CPU_ISA=%s: this CPU supports at most %s\n", env,
                   std::string(isa_name(detected)).c_str());
      return detected;
    }
    return *wanted;
  }();
  return isa;
}

}  // namespace

Isa isa_detect() {
#if defined(KILN_X86)
  static const Isa isa = detect_x86();
  return isa;
#else
  return Isa::kScalar;
#endif
}

Isa isa_active() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<Isa>(o);
  return env_or_detected();
}

Status isa_override(std::optional<Isa> isa) {
  if (!isa) {
    g_override.store(-1, std::memory_order_relaxed);
    return Status::ok();
  }
  if (*isa > isa_detect()) {
    return invalid_argument("this CPU does not support the " + std::string(isa_name(*isa)) +
                            " kernels (it supports at most " + std::string(isa_name(isa_detect())) +
                            ")");
  }
  g_override.store(static_cast<int>(*isa), std::memory_order_relaxed);
  return Status::ok();
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "unknown";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

}  // namespace kiln::cpu
