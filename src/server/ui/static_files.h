// The playground's static files (index.html, its styles and scripts, in this folder), compiled
// into the binary by cmake/embed_files.cmake so that `kiln serve` needs nothing beside itself and
// fetches nothing from elsewhere. `GET /` answers index.html; the other files live under /ui/.
// The router asks find_static_file() whether a path names one (router.h: Endpoint::kStatic, open
// without an API key, off with --no-ui); ApiService answers it with static_file_response().
//
// The files are immutable, static data; every function here is pure and safe from any thread.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "server/http_message.h"

namespace kiln::server {

struct EmbeddedFile {
  std::string_view name;                // file name in src/server/ui/ ("index.html")
  std::span<const unsigned char> data;  // its bytes
  std::string_view etag;                // quoted: "\"<first 20 hex digits of its SHA-256>\""
};

// Every embedded file, sorted by name; defined in the generated source.
std::span<const EmbeddedFile> embedded_files();

// The file a request path names ("/" is index.html, "/ui/NAME" is NAME), or nullptr.
const EmbeddedFile* find_static_file(std::string_view path);

// The media type of a file name by its extension ("text/javascript; charset=utf-8" for .js).
std::string_view static_content_type(std::string_view name);

// The answer to a GET or HEAD of `file`: 200 with its bytes, Content-Type, Cache-Control: no-cache
// (a client revalidates each time) and its ETag, or 304 with no body when If-None-Match names the
// ETag. The page may load only what this server serves (Content-Security-Policy).
HttpResponse static_file_response(const EmbeddedFile& file, const HttpRequest& request);

}  // namespace kiln::server
