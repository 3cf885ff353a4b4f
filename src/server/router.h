// HTTP routing: which endpoint a method and path name. Unknown paths are 404; a known path with
// the wrong method is 405 (with the methods it allows). Health, readiness and metadata of
// KServe, /health and the playground's static files are open without an API key; everything else
// needs one when the server has one. Pure function; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace kiln::server {

enum class Endpoint {
  kCompletions, kChat, kModels, kModel, kTokenize, kDetokenize, kMetrics, kHealth,
  kLive, kReady, kServerMetadata, kModelMetadata, kModelReady, kGenerate, kGenerateStream,
  kModelConfig, kInfer, kRepositoryIndex, kRepositoryLoad, kRepositoryUnload,
  kStatic,  // a file of the playground (server/ui/static_files.h): "/" and "/ui/NAME"
  kNone,  // no route: see Route::status
};

struct Route {
  Endpoint endpoint = Endpoint::kNone;
  std::string model;         // the {m} of /v2/models/{m}/..., /v2/repository/models/{m}/... and /v1/models/{id}
  std::string version;       // the {v} of /v2/models/{m}/versions/{v}/... ("" when not given)
  int status = 200;          // 404 or 405 when endpoint is kNone
  std::string allow;         // 405: the allowed methods
  bool open = false;         // served without an API key
  std::string_view name = "other";  // the endpoint label in metrics and logs
};

// `serve_ui`: whether the playground's files have routes (`kiln serve` without --no-ui); without
// them "/" is 404 like any unknown path.
Route route_request(std::string_view method, std::string_view path, bool serve_ui = false);

}  // namespace kiln::server
