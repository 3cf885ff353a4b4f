#include "server/server_config.h"

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

TEST(ServerConfig, DefaultsAreValid) { EXPECT_TRUE(validate_server_config(ServerConfig{}).is_ok()); }

TEST(ServerConfig, EachBadValueNamesItsFlag) {
  const auto message = [](auto change) {
    ServerConfig c;
    change(c);
    Status s = validate_server_config(c);
    EXPECT_FALSE(s.is_ok());
    return s.message();
  };
  EXPECT_NE(message([](ServerConfig& c) { c.port = 70000; }).find("--port"), std::string::npos);
  EXPECT_NE(message([](ServerConfig& c) { c.host.clear(); }).find("--host"), std::string::npos);
  EXPECT_NE(message([](ServerConfig& c) { c.shutdown_grace_s = -1; }).find("--shutdown-grace"), std::string::npos);
  EXPECT_NE(message([](ServerConfig& c) { c.stream_interval = 0; }).find("--stream-interval"), std::string::npos);
  EXPECT_NE(message([](ServerConfig& c) { c.network_threads = 0; }).find("--network-threads must be in [1, 64]; got 0"),
            std::string::npos);
  EXPECT_NE(message([](ServerConfig& c) { c.network_threads = 65; }).find("got 65"), std::string::npos);
  EXPECT_NE(message([](ServerConfig& c) { c.api_key = "a key"; }).find("API key"), std::string::npos);
}

TEST(ServerConfig, OneNetworkThreadOnFewCores) {
  EXPECT_EQ(default_network_threads(1), 1);
  EXPECT_EQ(default_network_threads(4), 1);
  EXPECT_EQ(default_network_threads(5), 2);
  EXPECT_EQ(default_network_threads(128), 2);
  ServerConfig c;
  c.network_threads = default_network_threads(2);
  EXPECT_TRUE(validate_server_config(c).is_ok());
}

}  // namespace
}  // namespace kiln::server
