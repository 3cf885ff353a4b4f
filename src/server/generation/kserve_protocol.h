// The KServe v2 / Triton HTTP wire format, apart from any transport: server and model metadata,
// and Triton's generate extension (POST /v2/models/{m}/generate and /generate_stream): a JSON
// object with "text_input" and sampling fields, at the top level or in "parameters", answered
// with {"model_name", "model_version", "text_output"} (server-sent events for the stream).
// Errors are KServe's {"error": message}. Pure functions; safe from any thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/generation/generation_plan.h"
#include "server/http_message.h"
#include "server/generation/response_format.h"
#include "server/generation/served_model.h"

namespace kiln::server {

ApiResult<GenerationPlan> parse_kserve_generate(const nlohmann::json& body, const ServedModel& model,
                                                const std::string& request_id, bool stream);

std::string kserve_server_metadata();
std::string kserve_model_metadata(const ServedModel& model);

std::unique_ptr<ResponseFormat> make_kserve_format(const ServedModel& model);

}  // namespace kiln::server
