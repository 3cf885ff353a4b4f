#include "server/http/request_framing.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <utility>

namespace kiln::server {
namespace {

namespace http = boost::beast::http;

std::optional<ApiError> check(std::initializer_list<std::pair<const char*, const char*>> fields, unsigned version = 11) {
  http::fields header;
  for (const auto& [k, v] : fields) header.insert(k, v);
  return check_request_framing(header, version);
}

int status(const std::optional<ApiError>& e) { return e ? e->status : 0; }

TEST(RequestFraming, OneLengthOrChunkedIsFramed) {
  EXPECT_FALSE(check({}));
  EXPECT_FALSE(check({{"Content-Length", "12"}}));
  EXPECT_FALSE(check({{"Transfer-Encoding", "chunked"}}));
  EXPECT_FALSE(check({{"Transfer-Encoding", "Chunked"}}));
  EXPECT_FALSE(check({{"Content-Length", "12"}}, 10));
}

TEST(RequestFraming, BothHeadersAre400) {
  // The smuggling shapes: a coding some parties read as chunked and others not, with a length.
  for (const char* te : {"chunked", "xchunked", "identity", "chunked, identity", "gzip, chunked"}) {
    auto e = check({{"Transfer-Encoding", te}, {"Content-Length", "5"}});
    ASSERT_TRUE(e) << te;
    EXPECT_EQ(e->status, 400) << te;
    EXPECT_NE(e->message.find("both Transfer-Encoding and Content-Length"), std::string::npos);
  }
}

TEST(RequestFraming, CodingsOtherThanChunkedAre501AndNamed) {
  for (const char* te : {"xchunked", "identity", "gzip, chunked", "chunked, identity", "deflate"}) {
    auto e = check({{"Transfer-Encoding", te}});
    ASSERT_TRUE(e) << te;
    EXPECT_EQ(e->status, 501) << te;
  }
  EXPECT_NE(check({{"Transfer-Encoding", "gzip, chunked"}})->message.find("'gzip'"), std::string::npos);
  // A list may span several fields.
  EXPECT_EQ(status(check({{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}})), 501);
}

TEST(RequestFraming, ChunkedTwiceEmptyOrInHttp10Is400) {
  EXPECT_EQ(status(check({{"Transfer-Encoding", "chunked, chunked"}})), 400);
  EXPECT_EQ(status(check({{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}})), 400);
  EXPECT_EQ(status(check({{"Transfer-Encoding", " , "}})), 400);
  EXPECT_EQ(status(check({{"Transfer-Encoding", "chunked"}}, 10)), 400);
}

TEST(RequestFraming, ConflictingOrMalformedLengthsAre400) {
  EXPECT_EQ(status(check({{"Content-Length", "5"}, {"Content-Length", "6"}})), 400);
  EXPECT_EQ(status(check({{"Content-Length", "5, 6"}})), 400);
  EXPECT_EQ(status(check({{"Content-Length", "-1"}})), 400);
  EXPECT_EQ(status(check({{"Content-Length", "0x10"}})), 400);
  EXPECT_FALSE(check({{"Content-Length", "5"}, {"Content-Length", "5"}}));
}

}  // namespace
}  // namespace kiln::server
