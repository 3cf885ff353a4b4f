// libFuzzer target: arbitrary bytes through the safetensors header parser. Every accepted file's
// tensor views must lie inside the input, and converting its float tensors must stay inside them
// (AddressSanitizer reports any stray read).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  kiln::Expected<kiln::formats::SafetensorsFile> file = kiln::formats::SafetensorsFile::parse(bytes);
  if (!file.has_value()) return 0;
  std::vector<float> out;
  for (const kiln::formats::TensorView& t : file->tensors()) {
    const std::byte* lo = bytes.data();
    const std::byte* hi = lo + bytes.size();
    if (t.data.data() < lo || t.data.data() + t.data.size() > hi) __builtin_trap();
    if (file->find(t.name) != &t) __builtin_trap();
    // Bound the work per input: conversion of large (but valid) tensors adds nothing.
    const int64_t numel = kiln::formats::tensor_numel(t);
    if (numel > (1 << 16)) continue;
    out.resize(static_cast<size_t>(numel));
    (void)kiln::formats::tensor_to_float(t, out);
  }
  return 0;
}
