// Optimisation profiles of a general graph's dynamic inputs (`kiln build model.onnx --profile
// NAME:MIN,OPT,MAX`): for one graph input, the smallest, the typical and the largest shape it
// will be fed. The builder checks a profile against the input it names and records it in the
// engine's metadata ("onnx" / "profiles"); the runtime refuses a shape outside [min, max]
// with one line naming the input, its shape and the allowed range. `opt` is the shape to tune
// for. An input without a profile takes any shape its declared dimensions allow.
//
// Plain values: whoever holds a profile owns it; nothing here keeps state.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "nlohmann/json_fwd.hpp"

namespace kiln::ir {

struct InputProfile {
  std::string input;
  Shape min, opt, max;
};

// Parses "NAME:1x3x32x100,1x3x32x320,1x3x32x960" (dims joined by 'x'; a rank-0 input has no
// dims, "NAME:,,").
Expected<InputProfile> input_profile_parse(const std::string& spec);
// "1x3x32x100" (the dims of one shape joined by 'x').
std::string input_profile_dims(const Shape& shape);

// Checks `profiles` against `graph`'s inputs: each names an input with a dynamic dimension, at
// most once, with the input's rank, its fixed dimensions, and min <= opt <= max in every dimension.
Status input_profiles_validate(const Graph& graph, const std::vector<InputProfile>& profiles);

// ok when `shape` lies within [profile.min, profile.max], else "input 'x' has shape [1, 3, 32, 2000],
// outside its profile: min [1, 3, 32, 32], max [8, 3, 32, 960]".
Status input_profile_check(const InputProfile& profile, const Shape& shape);

nlohmann::json input_profiles_to_json(const std::vector<InputProfile>& profiles);
// From the list input_profiles_to_json wrote; an absent (null) list is no profiles.
Expected<std::vector<InputProfile>> input_profiles_from_json(const nlohmann::json& json);

}  // namespace kiln::ir
