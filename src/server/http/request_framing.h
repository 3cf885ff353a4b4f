// How a request's body is framed (RFC 9112, section 6), checked once its header has arrived and
// before any of the body is read. A request whose length two parties could read differently is
// how a second request gets smuggled inside the first, so such a request is refused, never
// guessed at:
//   - Transfer-Encoding together with Content-Length: 400;
//   - Transfer-Encoding in an HTTP/1.0 request: 400;
//   - a transfer coding other than chunked (gzip, identity, xchunked, ...): 501, the coding named;
//   - chunked more than once: 400;
//   - Content-Length given twice with different values, or not a decimal number: 400.
// Pure; the transport and the request fuzzer call it on the parser's header, and make the
// HttpRequest the services read from the parsed message with http_request_from.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>

#include "server/api_error.h"
#include "server/http_message.h"

namespace kiln::server {

std::optional<ApiError> check_request_framing(const boost::beast::http::fields& header, unsigned version);

// The parsed message as the services read it (header names lower-case); its body is moved out.
HttpRequest http_request_from(boost::beast::http::request<boost::beast::http::string_body>& message);

}  // namespace kiln::server
