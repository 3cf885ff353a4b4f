// The checks every front end makes before it reads a body, in this order: a path with no route
// (404), a method the route does not take (405; the response then needs an Allow header holding
// route.allow), and a missing or wrong API key where the route is not open (401, compared in
// constant time). Pure; safe from any thread.
#pragma once

#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/http_message.h"
#include "server/router.h"

namespace kiln::server {

std::optional<ApiError> gate_request(const Route& route, const HttpRequest& request, const std::string& api_key);

}  // namespace kiln::server
