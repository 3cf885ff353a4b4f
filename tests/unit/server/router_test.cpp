#include "server/router.h"

#include <gtest/gtest.h>

#include "server/access_log.h"
#include "server/auth.h"

namespace kiln::server {
namespace {

TEST(Router, KnownRoutes) {
  EXPECT_EQ(route_request("POST", "/v1/completions").endpoint, Endpoint::kCompletions);
  EXPECT_EQ(route_request("POST", "/v1/chat/completions").endpoint, Endpoint::kChat);
  EXPECT_EQ(route_request("GET", "/v1/models").endpoint, Endpoint::kModels);
  EXPECT_EQ(route_request("HEAD", "/v1/models").endpoint, Endpoint::kModels);
  EXPECT_EQ(route_request("POST", "/tokenize").endpoint, Endpoint::kTokenize);
  EXPECT_EQ(route_request("POST", "/detokenize").endpoint, Endpoint::kDetokenize);
  EXPECT_EQ(route_request("GET", "/metrics").endpoint, Endpoint::kMetrics);
  EXPECT_EQ(route_request("GET", "/v2").endpoint, Endpoint::kServerMetadata);
  Route m = route_request("GET", "/v1/models/demo");
  EXPECT_EQ(m.endpoint, Endpoint::kModel);
  EXPECT_EQ(m.model, "demo");
  Route g = route_request("POST", "/v2/models/demo/generate_stream");
  EXPECT_EQ(g.endpoint, Endpoint::kGenerateStream);
  EXPECT_EQ(g.model, "demo");
  EXPECT_EQ(route_request("POST", "/v2/models/demo/versions/1/generate").endpoint, Endpoint::kGenerate);
  EXPECT_EQ(route_request("GET", "/v2/models/demo").endpoint, Endpoint::kModelMetadata);
  EXPECT_EQ(route_request("GET", "/v2/models/demo/ready").endpoint, Endpoint::kModelReady);
}

TEST(Router, ModelRepositoryRoutes) {
  Route infer = route_request("POST", "/v2/models/cls/versions/3/infer");
  EXPECT_EQ(infer.endpoint, Endpoint::kInfer);
  EXPECT_EQ(infer.model, "cls");
  EXPECT_EQ(infer.version, "3");
  EXPECT_FALSE(infer.open);
  EXPECT_EQ(route_request("POST", "/v2/models/cls/infer").version, "");
  EXPECT_EQ(route_request("GET", "/v2/models/cls/config").endpoint, Endpoint::kModelConfig);
  EXPECT_EQ(route_request("GET", "/v2/models/cls/versions/1").version, "1");
  EXPECT_EQ(route_request("POST", "/v2/repository/index").endpoint, Endpoint::kRepositoryIndex);
  Route load = route_request("POST", "/v2/repository/models/cls/load");
  EXPECT_EQ(load.endpoint, Endpoint::kRepositoryLoad);
  EXPECT_EQ(load.model, "cls");
  EXPECT_EQ(route_request("POST", "/v2/repository/models/cls/unload").endpoint, Endpoint::kRepositoryUnload);
  EXPECT_EQ(route_request("GET", "/v2/models/cls/infer").status, 405);
  EXPECT_EQ(route_request("GET", "/v2/repository/models/cls/load").status, 405);
  EXPECT_EQ(route_request("POST", "/v2/repository/models//load").status, 404);
  EXPECT_EQ(route_request("POST", "/v2/models/cls/versions//infer").status, 404);
}

TEST(Router, HealthIsOpenAndGenerationIsNot) {
  EXPECT_TRUE(route_request("GET", "/v2/health/live").open);
  EXPECT_TRUE(route_request("GET", "/v2/health/ready").open);
  EXPECT_TRUE(route_request("GET", "/health").open);
  EXPECT_FALSE(route_request("POST", "/v1/completions").open);
  EXPECT_FALSE(route_request("GET", "/metrics").open);
  EXPECT_FALSE(route_request("POST", "/v2/models/demo/generate").open);
}

TEST(Router, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  Route r = route_request("GET", "/v1/nothing");
  EXPECT_EQ(r.endpoint, Endpoint::kNone);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(route_request("POST", "/v2/models/demo/explode").status, 404);
  EXPECT_EQ(route_request("GET", "/v2/models/").status, 404);
  Route w = route_request("GET", "/v1/completions");
  EXPECT_EQ(w.status, 405);
  EXPECT_EQ(w.allow, "POST");
  EXPECT_EQ(route_request("DELETE", "/v1/models").status, 405);
  EXPECT_EQ(route_request("GET", "/v2/models/demo/generate").status, 405);
}

TEST(Auth, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret-key", "secret-key"));
  EXPECT_FALSE(constant_time_equal("secret-kez", "secret-key"));
  EXPECT_FALSE(constant_time_equal("secret", "secret-key"));
  EXPECT_FALSE(constant_time_equal("secret-key-longer", "secret-key"));
  EXPECT_FALSE(constant_time_equal("", "k"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(Auth, BearerHeader) {
  EXPECT_TRUE(bearer_matches("Bearer abc123", "abc123"));
  EXPECT_TRUE(bearer_matches("bearer  abc123 ", "abc123"));
  EXPECT_FALSE(bearer_matches("Basic abc123", "abc123"));
  EXPECT_FALSE(bearer_matches("Bearer abc124", "abc123"));
  EXPECT_FALSE(bearer_matches("abc123", "abc123"));
  EXPECT_FALSE(bearer_matches("", "abc123"));
}

TEST(AccessLog, RequestIdIsKeptWhenSaneElseGenerated) {
  EXPECT_EQ(request_id_for("req-42.a_b:c"), "req-42.a_b:c");
  const std::string fresh = request_id_for("");
  EXPECT_EQ(fresh.size(), 32u);
  EXPECT_NE(fresh, request_id_for(""));
  EXPECT_EQ(request_id_for("has space").size(), 32u);
  EXPECT_EQ(request_id_for("new\nline").size(), 32u);
  EXPECT_EQ(request_id_for(std::string(129, 'a')).size(), 32u);
}

TEST(AccessLog, LineIsJsonWithoutPromptUnlessAsked) {
  AccessLogEntry e;
  e.request_id = "r1";
  e.method = "POST";
  e.path = "/v1/completions";
  e.endpoint = "completions";
  e.status = 200;
  e.duration_s = 0.0123;
  e.prompt_tokens = 7;
  e.completion_tokens = 16;
  std::string line = access_log_line(e);
  EXPECT_NE(line.find("\"request_id\":\"r1\""), std::string::npos);
  EXPECT_NE(line.find("\"status\":200"), std::string::npos);
  EXPECT_NE(line.find("\"duration_ms\":12"), std::string::npos);
  EXPECT_NE(line.find("\"completion_tokens\":16"), std::string::npos);
  EXPECT_EQ(line.find("prompt\""), std::string::npos);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  e.prompt = "It is a truth";
  EXPECT_NE(access_log_line(e).find("\"prompt\":\"It is a truth\""), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
