// A model repository's or batcher's Status as the refusal both front ends (HTTP and gRPC) give:
// no such model 404, not ready or a bad value 400, a full queue 429, anything else 500.
#pragma once

#include "base/status.h"
#include "server/api_error.h"

namespace kiln::server {

ApiError repository_api_error(const Status& status);

}  // namespace kiln::server
