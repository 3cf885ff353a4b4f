#include "server/request_gate.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <utility>

namespace kiln::server {
namespace {

HttpRequest request(std::string method, std::string target,
                    std::initializer_list<std::pair<const char*, const char*>> headers, std::string body = "") {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  for (const auto& [k, v] : headers) r.headers.emplace_back(k, v);
  r.body = std::move(body);
  return r;
}

int gate(const HttpRequest& r, const ServerConfig& c = {}) {
  auto e = gate_request(route_request(r.method, r.path()), r, c);
  return e ? e->status : 0;
}

const std::pair<const char*, const char*> kJson = {"content-type", "application/json"};

TEST(RequestGate, HostIsRequiredInHttp11AndChecked) {
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "127.0.0.1:8000"}})), 0);
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "localhost"}})), 0);
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "[::1]:8000"}})), 0);
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "LOCALHOST:80"}})), 0);
  EXPECT_EQ(gate(request("GET", "/v1/models", {})), 400);
  HttpRequest old = request("GET", "/v1/models", {});
  old.version = 10;
  EXPECT_EQ(gate(old), 0);
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "127.0.0.1"}, {"host", "evil.example"}})), 400);
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "127.0.0.1:80x"}})), 400);
  // DNS rebinding: a name the attacker controls that resolves to loopback.
  auto e = gate_request(route_request("GET", "/metrics"), request("GET", "/metrics", {{"host", "evil.example:8000"}}), {});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 403);
  EXPECT_NE(e->message.find("--allowed-hosts evil.example"), std::string::npos);
  // Health checks are open to no key, but not to any Host.
  EXPECT_EQ(gate(request("GET", "/health", {{"host", "evil.example"}})), 403);
}

TEST(RequestGate, AllowedHostsWidenOrOpenTheCheck) {
  ServerConfig c;
  c.allowed_hosts = {"kiln.internal"};
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "kiln.internal:8000"}}), c), 0);
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "localhost:8000"}}), c), 403);
  c.allowed_hosts = {"*"};
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "anything.example"}}), c), 0);
  // Bound to a non-loopback address, any name is allowed by default.
  ServerConfig wide;
  wide.host = "0.0.0.0";
  EXPECT_EQ(gate(request("GET", "/v1/models", {{"host", "10.1.2.3:8000"}}), wide), 0);
  EXPECT_EQ(default_allowed_hosts("127.0.0.2").back(), "127.0.0.2");
  EXPECT_EQ(default_allowed_hosts("0.0.0.0"), std::vector<std::string>{"*"});
}

TEST(RequestGate, CrossOriginPagesAreRefusedUnlessAllowed) {
  const auto from = [](const char* origin) {
    return request("POST", "/v1/completions", {{"host", "127.0.0.1:8000"}, {"origin", origin}, kJson}, "{}");
  };
  EXPECT_EQ(gate(from("http://127.0.0.1:8000")), 0);  // the server's own page
  EXPECT_EQ(gate(from("https://evil.example")), 403);
  EXPECT_EQ(gate(from("null")), 403);
  ServerConfig c;
  c.allowed_origins = {"https://app.example"};
  EXPECT_EQ(gate(from("https://app.example"), c), 0);
  EXPECT_EQ(gate(from("https://evil.example"), c), 403);
  EXPECT_FALSE(cors_headers(from("https://app.example"), c).empty());
  EXPECT_TRUE(cors_headers(from("https://evil.example"), c).empty());
  EXPECT_TRUE(cors_headers(from("http://127.0.0.1:8000"), ServerConfig{}).empty());
}

TEST(RequestGate, PreflightsAreAnsweredForAllowedOriginsOnly) {
  const auto preflight = [](const char* origin) {
    return request("OPTIONS", "/v1/chat/completions",
                   {{"host", "127.0.0.1:8000"}, {"origin", origin}, {"access-control-request-method", "POST"}});
  };
  ASSERT_TRUE(is_preflight(preflight("https://app.example")));
  EXPECT_FALSE(is_preflight(request("OPTIONS", "/v1/models", {{"host", "127.0.0.1"}})));
  ServerConfig c;
  c.allowed_origins = {"https://app.example"};
  HttpResponse ok = preflight_response(preflight("https://app.example"), c);
  EXPECT_EQ(ok.status, 204);
  bool allow_origin = false;
  for (const auto& [k, v] : ok.headers) allow_origin |= k == "Access-Control-Allow-Origin" && v == "https://app.example";
  EXPECT_TRUE(allow_origin);
  EXPECT_EQ(preflight_response(preflight("https://evil.example"), c).status, 403);
  EXPECT_EQ(preflight_response(preflight("https://app.example"), ServerConfig{}).status, 403);
}

TEST(RequestGate, JsonEndpointsNeedAJsonContentType) {
  const auto post = [](const char* type) {
    HttpRequest r = request("POST", "/v1/chat/completions", {{"host", "127.0.0.1"}}, "{}");
    if (type) r.headers.emplace_back("content-type", type);
    return r;
  };
  EXPECT_EQ(gate(post("application/json")), 0);
  EXPECT_EQ(gate(post("Application/JSON; charset=utf-8")), 0);
  EXPECT_EQ(gate(post("text/plain")), 415);  // what a web page may send without a preflight
  EXPECT_EQ(gate(post("application/x-www-form-urlencoded")), 415);
  EXPECT_EQ(gate(post(nullptr)), 415);
  auto e = gate_request(route_request("POST", "/v1/chat/completions"), post("text/plain"), {});
  EXPECT_NE(e->message.find("'text/plain'"), std::string::npos);
  // KServe's binary tensors: octet-stream with the JSON header's length.
  HttpRequest binary = request("POST", "/v2/models/m/infer",
                               {{"host", "127.0.0.1"}, {"content-type", "application/octet-stream"},
                                {"inference-header-content-length", "2"}},
                               "{}xx");
  EXPECT_EQ(gate(binary), 0);
  binary.headers.pop_back();
  EXPECT_EQ(gate(binary), 415);
  // Bodies the route does not read, and empty bodies, are not checked.
  EXPECT_EQ(gate(request("POST", "/v2/repository/models/m/load", {{"host", "127.0.0.1"}})), 0);
}

TEST(RequestGate, TheOrderIsHostOriginRouteKeyType) {
  ServerConfig c;
  c.api_key = "k";
  EXPECT_EQ(gate(request("POST", "/nowhere", {{"host", "evil.example"}}), c), 403);
  EXPECT_EQ(gate(request("POST", "/nowhere", {{"host", "127.0.0.1"}}), c), 404);
  EXPECT_EQ(gate(request("GET", "/v1/completions", {{"host", "127.0.0.1"}}), c), 405);
  EXPECT_EQ(gate(request("POST", "/v1/completions", {{"host", "127.0.0.1"}}, "{}"), c), 401);
  EXPECT_EQ(gate(request("POST", "/v1/completions", {{"host", "127.0.0.1"}, {"authorization", "Bearer k"}}, "{}"), c), 415);
}

}  // namespace
}  // namespace kiln::server
