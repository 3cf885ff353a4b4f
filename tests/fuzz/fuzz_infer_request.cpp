// libFuzzer target: arbitrary KServe infer bodies through the HTTP wire format's reader (JSON
// tensors, or a JSON header and binary tensors when the first byte is odd, the next two giving
// the header's length) against a fixed model configuration, and an accepted request through the
// response writer. Every outcome must be a request or a 400 with a message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/repository/infer_protocol.h"

namespace {

kiln::server::ModelConfig fuzz_config() {
  kiln::server::ModelConfig c;
  c.name = "fuzz";
  c.max_batch_size = 4;
  c.inputs = {{"x", kiln::ir::DType::kF32, {2, -1}}, {"ids", kiln::ir::DType::kI64, {-1}},
              {"h", kiln::ir::DType::kF16, {1}},    {"b", kiln::ir::DType::kBool, {2}}};
  c.outputs = {{"y", kiln::ir::DType::kF32, {2}}};
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln::server::ModelConfig config = fuzz_config();
  if (size < 3) return 0;
  std::optional<size_t> header;
  if (data[0] & 1) header = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
  const std::string_view body(reinterpret_cast<const char*>(data) + 3, size - 3);
  auto parsed = kiln::server::parse_infer_request(body, header, config);
  if (auto* e = std::get_if<kiln::server::ApiError>(&parsed)) {
    if (e->status != 400 || e->message.empty()) __builtin_trap();
    return 0;
  }
  const auto& req = std::get<kiln::server::InferRequest>(parsed);
  if (req.inputs.size() != config.inputs.size() || req.batch < 1 || req.batch > config.max_batch_size) __builtin_trap();
  kiln::server::TensorList outputs;
  kiln::ir::Tensor y(kiln::ir::DType::kF32, {req.batch, 2});
  for (int64_t i = 0; i < y.numel(); ++i) y.mutable_data<float>()[i] = static_cast<float>(i);
  outputs.emplace_back("y", std::move(y));
  (void)kiln::server::infer_response(req, outputs, "fuzz", "1");
  return 0;
}
