// The KServe v2 inference protocol's HTTP body, apart from any transport: POST
// /v2/models/{m}[/versions/{v}]/infer. A request is a JSON object {"id", "parameters", "inputs":
// [{"name", "shape", "datatype", "data"}], "outputs": [{"name", "parameters"}]}; with the binary
// data extension the body is that JSON (its length in the Inference-Header-Content-Length
// header) followed by the raw bytes of each input whose parameters give "binary_data_size", in
// input order. Every input is checked against the model's configuration (names, datatypes,
// shapes, the batch dimension, the element count) before it reaches the model, and a refusal
// names the input. The response carries each output as JSON data, or as raw bytes after the JSON
// where the request asked for "binary_data" (per output) or "binary_data_output" (for all).
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/tensor.h"
#include "server/api_error.h"
#include "server/http_message.h"
#include "server/repository/model_config.h"

namespace kiln::server {

struct InferOutputChoice {
  std::string name;
  bool binary = false;
};

struct InferRequest {
  std::string id;                             // echoed in the response ("" when absent)
  std::map<std::string, ir::Tensor> inputs;   // by input name, shapes as sent
  int64_t batch = 1;                          // the batch dimension's size (1 without one)
  std::vector<InferOutputChoice> outputs;     // what to return, in this order
};

using TensorList = std::vector<std::pair<std::string, ir::Tensor>>;

// `header_length`: the Inference-Header-Content-Length header's value, when sent.
ApiResult<InferRequest> parse_infer_request(std::string_view body, std::optional<size_t> header_length,
                                            const ModelConfig& config);

// The checks every wire form of a request shares (JSON here, protobuf in grpc_server.cpp).
// One input's name, datatype and shape against the configuration: its spec, or the refusal
// (`field` names it in the request, e.g. "inputs[1]").
ApiResult<const ConfigTensor*> infer_check_input(const ModelConfig& config, const std::string& field, const std::string& name,
                                                 const std::string& datatype, const std::vector<int64_t>& shape,
                                                 const std::map<std::string, ir::Tensor>& earlier);
// Once every input is read: none missing, one batch size among them (the request's batch).
ApiResult<int64_t> infer_check_complete(const ModelConfig& config, const std::map<std::string, ir::Tensor>& inputs);
// A requested output: known to the model and asked once.
std::optional<ApiError> infer_check_output(const ModelConfig& config, const std::string& field, const std::string& name,
                                           const std::vector<InferOutputChoice>& earlier);

// The response to `request` from the model's `outputs` (all of them, by name).
HttpResponse infer_response(const InferRequest& request, const TensorList& outputs, const std::string& model,
                            const std::string& version);

}  // namespace kiln::server
