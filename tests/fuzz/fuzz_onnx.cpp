// libFuzzer target: arbitrary bytes through the ONNX reader (protobuf parse, graph import, the
// per-op translators) and, for a model Kiln accepts, the IR verifier and its JSON round trip.
// Every outcome must be a value or a Status; external data is looked up in a directory that does
// not exist, so no input reads files.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/onnx/onnx_model.h"
#include "ir/graph.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto import = kiln::formats::onnx_import_bytes(bytes, "/nonexistent/kiln-fuzz", "fuzz.onnx");
  if (!import.has_value()) {
    if (import.status().message().empty()) __builtin_trap();
    return 0;
  }
  for (const auto& u : import->unsupported) {
    if (u.line().empty()) __builtin_trap();
  }
  auto graph = kiln::formats::onnx_import_require_supported(std::move(*import));
  if (!graph.has_value()) return 0;
  (void)kiln::ir::print_graph(*graph);
  auto again = kiln::ir::graph_from_json(kiln::ir::graph_to_json(*graph));
  if (!again.has_value() || again->nodes().size() != graph->nodes().size()) __builtin_trap();
  return 0;
}
