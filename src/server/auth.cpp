#include "server/auth.h"

#include <cctype>

namespace kiln::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Walk the expected key's length whatever the candidate's, folding every difference in.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ static_cast<unsigned char>(b[i])));
  }
  return diff == 0;
}

bool bearer_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
  }
  std::string_view token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return constant_time_equal(token, key);
}

}  // namespace kiln::server
