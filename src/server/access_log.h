// Request ids and the access log: every HTTP request gets an id (the client's X-Request-Id when
// it is a sane token, else a new random one), echoed in the response, and one JSON line on
// stderr when it ends. The line never holds prompt text unless the server runs with
// --log-prompts. Safe from any thread (one write per line).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::server {

// The client's id when it is 1-128 characters of [A-Za-z0-9._:-], else a fresh 32-hex-digit id.
std::string request_id_for(std::string_view client_id);

struct AccessLogEntry {
  std::string request_id;
  std::string method;
  std::string path;
  std::string_view endpoint;
  int status = 0;
  double duration_s = 0;
  std::string remote;
  int64_t prompt_tokens = -1;      // -1: not a generation request
  int64_t completion_tokens = -1;
  std::optional<std::string> prompt;  // only with --log-prompts
  std::string error;               // the refusal's message, if any
  std::string user;                // the request's end-user id (OpenAI's user field), if any
};

// The JSON line (no newline).
std::string access_log_line(const AccessLogEntry& entry);
void write_access_log(const AccessLogEntry& entry);

}  // namespace kiln::server
