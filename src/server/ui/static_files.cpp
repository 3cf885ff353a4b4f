#include "server/ui/static_files.h"

#include <string>

namespace kiln::server {
namespace {

constexpr std::string_view kAssetPrefix = "/ui/";

// Whether an If-None-Match header (a list of quoted tags, or *) names `etag`. Weak tags (W/"...")
// match too: a GET may use the weak comparison (RFC 9110, 13.1.2).
bool etag_matches(std::string_view header, std::string_view etag) {
  while (!header.empty()) {
    const size_t comma = header.find(',');
    std::string_view tag = trim_ows(header.substr(0, comma));
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

const EmbeddedFile* find_static_file(std::string_view path) {
  std::string_view name;
  if (path == "/") {
    name = "index.html";
  } else if (path.starts_with(kAssetPrefix) && path.size() > kAssetPrefix.size()) {
    name = path.substr(kAssetPrefix.size());
  } else {
    return nullptr;
  }
  for (const EmbeddedFile& f : embedded_files()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string_view static_content_type(std::string_view name) {
  struct Type {
    std::string_view extension, media_type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"},       {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},   {".svg", "image/svg+xml"},
      {".png", "image/png"},                       {".json", "application/json"},
  };
  for (const Type& t : kTypes) {
    if (name.ends_with(t.extension)) return t.media_type;
  }
  return "application/octet-stream";
}

HttpResponse static_file_response(const EmbeddedFile& file, const HttpRequest& request) {
  HttpResponse r;
  r.content_type = std::string(static_content_type(file.name));
  r.headers = {
      {"Cache-Control", "no-cache"},
      {"ETag", std::string(file.etag)},
      {"X-Content-Type-Options", "nosniff"},
      {"Content-Security-Policy",
       "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'"},
      {"Referrer-Policy", "no-referrer"},
  };
  if (etag_matches(request.header("if-none-match"), file.etag)) {
    r.status = 304;
    return r;
  }
  r.body.assign(reinterpret_cast<const char*>(file.data.data()), file.data.size());
  return r;
}

}  // namespace kiln::server
