// API-key checks: "Authorization: Bearer KEY" compared with the server's key in time that does
// not depend on where the two first differ, so that the key cannot be guessed byte by byte from
// response times. Pure functions; safe from any thread.
#pragma once

#include <string_view>

namespace kiln::server {

// Equal strings, compared in time that depends only on the lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

// Whether an Authorization header value carries `key` as a Bearer token (scheme case-insensitive).
bool bearer_matches(std::string_view authorization, std::string_view key);

}  // namespace kiln::server
