// Optimisation profiles: parsing the --profile form, checking a profile against the graph input
// it names, and bounding an input's shape.
#include "ir/input_profile.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace kiln::ir {
namespace {

// One input "x" of shape [batch, 3, width] (batch and width named, 3 fixed).
Graph graph_with_input() {
  Graph g;
  const int64_t batch = g.dim_symbol("batch"), width = g.dim_symbol("width");
  g.inputs().push_back(g.add_value("x", DType::kF32, {batch, 3, width}));
  return g;
}

TEST(InputProfile, ParsesNameAndThreeShapes) {
  auto p = input_profile_parse("images:1x3x32,2x3x320,8x3x960");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->input, "images");
  EXPECT_EQ(p->min, (Shape{1, 3, 32}));
  EXPECT_EQ(p->opt, (Shape{2, 3, 320}));
  EXPECT_EQ(p->max, (Shape{8, 3, 960}));
  EXPECT_EQ(input_profile_dims(p->max), "8x3x960");
  auto scoped = input_profile_parse("ns:x:1,2,3");  // the last ':' separates the name
  ASSERT_TRUE(scoped);
  EXPECT_EQ(scoped->input, "ns:x");
}

TEST(InputProfile, RefusesMalformedSpecs) {
  for (const char* bad : {"x", ":1,2,3", "x:1,2", "x:1,2,3,4", "x:1xa,2,3", "x:-1,2,3", "x:1x,2,3", "x:1,2,+3"}) {
    EXPECT_FALSE(input_profile_parse(bad)) << bad;
  }
}

TEST(InputProfile, ValidatesAgainstTheInput) {
  const Graph g = graph_with_input();
  auto check = [&](const std::string& spec) { return input_profiles_validate(g, {*input_profile_parse(spec)}); };
  EXPECT_TRUE(check("x:1x3x32,2x3x320,8x3x960").is_ok());
  Status fixed = check("x:1x4x32,2x3x320,8x3x960");
  ASSERT_FALSE(fixed.is_ok());
  EXPECT_NE(fixed.message().find("dimension 1 is fixed at 3"), std::string::npos) << fixed.message();
  Status rank = check("x:1x3,2x3,8x3");
  ASSERT_FALSE(rank.is_ok());
  EXPECT_NE(rank.message().find("rank 2, the input has shape [batch,3,width]"), std::string::npos) << rank.message();
  EXPECT_FALSE(check("x:1x3x32,2x3x20,8x3x960").is_ok());  // opt < min
  EXPECT_FALSE(check("y:1x3x32,2x3x320,8x3x960").is_ok());
  auto p = *input_profile_parse("x:1x3x32,2x3x320,8x3x960");
  EXPECT_FALSE(input_profiles_validate(g, {p, p}).is_ok());
  Graph fixed_graph;
  fixed_graph.inputs().push_back(fixed_graph.add_value("x", DType::kF32, {1, 3}));
  EXPECT_FALSE(input_profiles_validate(fixed_graph, {*input_profile_parse("x:1x3,1x3,1x3")}).is_ok());
}

TEST(InputProfile, BoundsTheShapeInclusively) {
  const auto p = *input_profile_parse("x:1x3x32,2x3x320,8x3x960");
  EXPECT_TRUE(input_profile_check(p, {1, 3, 32}).is_ok());
  EXPECT_TRUE(input_profile_check(p, {8, 3, 960}).is_ok());
  Status wide = input_profile_check(p, {1, 3, 961});
  ASSERT_FALSE(wide.is_ok());
  EXPECT_EQ(wide.message(), "input 'x' has shape [1, 3, 961], outside its profile: min [1, 3, 32], max [8, 3, 960]");
  EXPECT_FALSE(input_profile_check(p, {0, 3, 32}).is_ok());
  EXPECT_FALSE(input_profile_check(p, {1, 3}).is_ok());
}

TEST(InputProfile, RoundTripsThroughJson) {
  const std::vector<InputProfile> in = {*input_profile_parse("x:1x3x32,2x3x320,8x3x960"),
                                        *input_profile_parse("mask:1,4,9")};
  auto out = input_profiles_from_json(nlohmann::json::parse(input_profiles_to_json(in).dump()));
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[1].input, "mask");
  EXPECT_EQ((*out)[0].opt, (Shape{2, 3, 320}));
  EXPECT_TRUE(input_profiles_from_json(nlohmann::json())->empty());
  EXPECT_FALSE(input_profiles_from_json(nlohmann::json::parse(R"([{"input": "x", "min": [1]}])")));
}

}  // namespace
}  // namespace kiln::ir
