#include "server/ui/static_files.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "server/request_gate.h"
#include "server/router.h"

namespace kiln::server {
namespace {

std::string_view header_of(const HttpResponse& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return {};
}

HttpRequest get_request(std::string target) {
  HttpRequest r;
  r.method = "GET";
  r.target = std::move(target);
  r.headers.emplace_back("host", "127.0.0.1:8000");
  return r;
}

TEST(StaticFiles, RootIsTheIndexPageAndAssetsLiveUnderUi) {
  const EmbeddedFile* index = find_static_file("/");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->name, "index.html");
  const std::string_view html(reinterpret_cast<const char*>(index->data.data()), index->data.size());
  EXPECT_TRUE(html.starts_with("<!doctype html>"));
  // Every file the page names is embedded, and reachable under /ui/.
  for (const char* asset : {"/ui/playground.js", "/ui/playground.css", "/ui/favicon.svg"}) {
    EXPECT_NE(html.find(asset), std::string_view::npos) << asset;
    const EmbeddedFile* f = find_static_file(asset);
    ASSERT_NE(f, nullptr) << asset;
    EXPECT_EQ("/ui/" + std::string(f->name), asset);
  }
  for (const EmbeddedFile& f : embedded_files()) {
    EXPECT_EQ(find_static_file("/ui/" + std::string(f.name)), &f);
    EXPECT_FALSE(f.data.empty()) << f.name;
  }
}

TEST(StaticFiles, UnknownPathsAreNotFiles) {
  EXPECT_EQ(find_static_file("/ui/"), nullptr);
  EXPECT_EQ(find_static_file("/ui/missing.js"), nullptr);
  EXPECT_EQ(find_static_file("/index.html"), nullptr);
  EXPECT_EQ(find_static_file("/ui/../index.html"), nullptr);
  EXPECT_EQ(find_static_file("/playground.js"), nullptr);
  EXPECT_EQ(find_static_file(""), nullptr);
}

TEST(StaticFiles, ContentTypesFollowTheExtension) {
  EXPECT_EQ(static_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(static_content_type("playground.css"), "text/css; charset=utf-8");
  // Browsers run a module script only when it is served as JavaScript.
  EXPECT_EQ(static_content_type("chat.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(static_content_type("favicon.svg"), "image/svg+xml");
  EXPECT_EQ(static_content_type("data.bin"), "application/octet-stream");
  for (const EmbeddedFile& f : embedded_files()) EXPECT_NE(static_content_type(f.name), "application/octet-stream") << f.name;
}

TEST(StaticFiles, ResponseCarriesTypeCachingAndAnEtagThatRevalidates) {
  const EmbeddedFile& js = *find_static_file("/ui/playground.js");
  HttpResponse r = static_file_response(js, get_request("/ui/playground.js"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(r.body.size(), js.data.size());
  EXPECT_EQ(header_of(r, "Cache-Control"), "no-cache");
  EXPECT_EQ(header_of(r, "X-Content-Type-Options"), "nosniff");
  EXPECT_NE(header_of(r, "Content-Security-Policy").find("default-src 'self'"), std::string_view::npos);
  const std::string etag(header_of(r, "ETag"));
  ASSERT_GE(etag.size(), 3u);
  EXPECT_EQ(etag.front(), '"');
  EXPECT_EQ(etag.back(), '"');

  HttpRequest again = get_request("/ui/playground.js");
  again.headers = {{"if-none-match", etag}};
  HttpResponse not_modified = static_file_response(js, again);
  EXPECT_EQ(not_modified.status, 304);
  EXPECT_TRUE(not_modified.body.empty());
  EXPECT_EQ(header_of(not_modified, "ETag"), etag);
  again.headers = {{"if-none-match", "\"other\", W/" + etag}};
  EXPECT_EQ(static_file_response(js, again).status, 304);
  again.headers = {{"if-none-match", "\"other\""}};
  EXPECT_EQ(static_file_response(js, again).status, 200);
}

TEST(StaticFiles, EachFileHasItsOwnEtag) {
  std::set<std::string_view> tags;
  for (const EmbeddedFile& f : embedded_files()) tags.insert(f.etag);
  EXPECT_EQ(tags.size(), embedded_files().size());
}

TEST(StaticFiles, RoutedOpenForGetAndHeadOnlyWhenTheUiIsOn) {
  for (const char* method : {"GET", "HEAD"}) {
    Route r = route_request(method, "/", true);
    EXPECT_EQ(r.endpoint, Endpoint::kStatic);
    EXPECT_TRUE(r.open);
    EXPECT_EQ(r.name, "ui");
    EXPECT_EQ(route_request(method, "/ui/playground.css", true).endpoint, Endpoint::kStatic);
  }
  Route post = route_request("POST", "/", true);
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.allow, "GET");
  EXPECT_EQ(route_request("GET", "/ui/missing.js", true).status, 404);
  // --no-ui: "/" is an unknown path again, as is every file.
  EXPECT_EQ(route_request("GET", "/", false).status, 404);
  EXPECT_EQ(route_request("GET", "/ui/playground.js", false).status, 404);
  EXPECT_EQ(route_request("POST", "/", false).status, 404);
  // The API itself is routed as before.
  EXPECT_EQ(route_request("GET", "/metrics", true).endpoint, Endpoint::kMetrics);
}

TEST(StaticFiles, ReachableWithoutTheApiKeyWhileTheApiNeedsIt) {
  ServerConfig keyed;
  keyed.api_key = "secret";
  const HttpRequest page = get_request("/");
  EXPECT_FALSE(gate_request(route_request("GET", "/", true), page, keyed).has_value());
  const std::optional<ApiError> metrics = gate_request(route_request("GET", "/metrics", true), get_request("/metrics"), keyed);
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->status, 401);
  const std::optional<ApiError> off = gate_request(route_request("GET", "/", false), page, keyed);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(off->status, 404);
}

}  // namespace
}  // namespace kiln::server
