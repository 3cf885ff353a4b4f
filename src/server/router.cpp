#include "server/router.h"

#include "server/ui/static_files.h"

namespace kiln::server {
namespace {

struct Fixed {
  std::string_view path;
  std::string_view method;
  Endpoint endpoint;
  std::string_view name;
  bool open;
};

constexpr Fixed kFixed[] = {
    {"/v1/completions", "POST", Endpoint::kCompletions, "completions", false},
    {"/v1/chat/completions", "POST", Endpoint::kChat, "chat_completions", false},
    {"/v1/models", "GET", Endpoint::kModels, "models", false},
    {"/tokenize", "POST", Endpoint::kTokenize, "tokenize", false},
    {"/detokenize", "POST", Endpoint::kDetokenize, "detokenize", false},
    {"/metrics", "GET", Endpoint::kMetrics, "metrics", false},
    {"/health", "GET", Endpoint::kHealth, "health", true},
    {"/v2/health/live", "GET", Endpoint::kLive, "health_live", true},
    {"/v2/health/ready", "GET", Endpoint::kReady, "health_ready", true},
    {"/v2", "GET", Endpoint::kServerMetadata, "server_metadata", true},
    {"/v2/repository/index", "POST", Endpoint::kRepositoryIndex, "repository_index", false},
};

Route matched(Endpoint e, std::string_view name, bool open, std::string model = {}) {
  Route r;
  r.endpoint = e;
  r.name = name;
  r.open = open;
  r.model = std::move(model);
  return r;
}

Route wrong_method(std::string_view allow, std::string_view name) {
  Route r;
  r.status = 405;
  r.allow = std::string(allow);
  r.name = name;
  return r;
}

}  // namespace

Route route_request(std::string_view method, std::string_view path, bool serve_ui) {
  // HEAD is answered like GET by the transport (headers only).
  const std::string_view m = method == "HEAD" ? "GET" : method;
  for (const Fixed& f : kFixed) {
    if (path != f.path) continue;
    if (m != f.method) return wrong_method(f.method, f.name);
    return matched(f.endpoint, f.name, f.open);
  }
  constexpr std::string_view v1_models = "/v1/models/";
  if (path.starts_with(v1_models) && path.size() > v1_models.size()) {
    std::string_view id = path.substr(v1_models.size());
    if (m != "GET") return wrong_method("GET", "model");
    return matched(Endpoint::kModel, "model", false, std::string(id));
  }
  constexpr std::string_view v2_models = "/v2/models/";
  if (path.starts_with(v2_models) && path.size() > v2_models.size()) {
    std::string_view rest = path.substr(v2_models.size());
    const size_t slash = rest.find('/');
    std::string model(rest.substr(0, slash));
    std::string_view tail = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
    // KServe's versioned paths: /v2/models/{m}/versions/{v}/...
    std::string version;
    if (tail.starts_with("/versions/")) {
      const size_t next = tail.find('/', 10);
      version = std::string(tail.substr(10, next == std::string_view::npos ? std::string_view::npos : next - 10));
      tail = next == std::string_view::npos ? std::string_view() : tail.substr(next);
      if (version.empty()) {
        Route none;
        none.status = 404;
        return none;
      }
    }
    auto with_version = [&](Route r) {
      r.version = version;
      return r;
    };
    if (tail.empty()) {
      if (m != "GET") return wrong_method("GET", "model_metadata");
      return with_version(matched(Endpoint::kModelMetadata, "model_metadata", true, model));
    }
    if (tail == "/ready") {
      if (m != "GET") return wrong_method("GET", "model_ready");
      return with_version(matched(Endpoint::kModelReady, "model_ready", true, model));
    }
    if (tail == "/config") {
      if (m != "GET") return wrong_method("GET", "model_config");
      return with_version(matched(Endpoint::kModelConfig, "model_config", false, model));
    }
    if (tail == "/infer") {
      if (m != "POST") return wrong_method("POST", "infer");
      return with_version(matched(Endpoint::kInfer, "infer", false, model));
    }
    if (tail == "/generate") {
      if (m != "POST") return wrong_method("POST", "generate");
      return with_version(matched(Endpoint::kGenerate, "generate", false, model));
    }
    if (tail == "/generate_stream") {
      if (m != "POST") return wrong_method("POST", "generate_stream");
      return with_version(matched(Endpoint::kGenerateStream, "generate_stream", false, model));
    }
  }
  // The repository extension: /v2/repository/models/{m}/load and /unload.
  constexpr std::string_view repository_models = "/v2/repository/models/";
  if (path.starts_with(repository_models)) {
    std::string_view rest = path.substr(repository_models.size());
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos && slash > 0) {
      const std::string_view action = rest.substr(slash);
      const std::string model(rest.substr(0, slash));
      if (action == "/load" || action == "/unload") {
        const bool load = action == "/load";
        const std::string_view name = load ? "repository_load" : "repository_unload";
        if (m != "POST") return wrong_method("POST", name);
        return matched(load ? Endpoint::kRepositoryLoad : Endpoint::kRepositoryUnload, name, false, model);
      }
    }
  }
  if (serve_ui && find_static_file(path) != nullptr) {
    if (m != "GET") return wrong_method("GET", "ui");
    return matched(Endpoint::kStatic, "ui", true);
  }
  Route r;
  r.status = 404;
  return r;
}

}  // namespace kiln::server
