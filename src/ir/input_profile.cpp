#include "ir/input_profile.h"

#include <set>

#include "nlohmann/json.hpp"

namespace kiln::ir {
namespace {

Expected<Shape> parse_dims(const std::string& text, const std::string& spec) {
  Shape dims;
  if (text.empty()) return dims;
  size_t start = 0;
  while (true) {
    const size_t x = text.find('x', start);
    const std::string part = text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v < 0 || part[0] == '+' || part[0] == '-') {
      return invalid_argument("--profile '" + spec + "': '" + text + "' is not a shape such as 1x3x32x100");
    }
    dims.push_back(v);
    if (x == std::string::npos) return dims;
    start = x + 1;
  }
}

}  // namespace

Expected<InputProfile> input_profile_parse(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return invalid_argument("--profile '" + spec + "' must be NAME:MIN,OPT,MAX (shapes such as 1x3x32x100)");
  }
  InputProfile p;
  p.input = spec.substr(0, colon);
  const std::string rest = spec.substr(colon + 1);
  const size_t c1 = rest.find(','), c2 = c1 == std::string::npos ? c1 : rest.find(',', c1 + 1);
  if (c1 == std::string::npos || c2 == std::string::npos || rest.find(',', c2 + 1) != std::string::npos) {
    return invalid_argument("--profile '" + spec + "' must give three shapes: NAME:MIN,OPT,MAX");
  }
  KILN_ASSIGN_OR_RETURN(p.min, parse_dims(rest.substr(0, c1), spec));
  KILN_ASSIGN_OR_RETURN(p.opt, parse_dims(rest.substr(c1 + 1, c2 - c1 - 1), spec));
  KILN_ASSIGN_OR_RETURN(p.max, parse_dims(rest.substr(c2 + 1), spec));
  return p;
}

std::string input_profile_dims(const Shape& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

Status input_profiles_validate(const Graph& graph, const std::vector<InputProfile>& profiles) {
  std::set<std::string> seen;
  for (const InputProfile& p : profiles) {
    const std::string where = "profile of input '" + p.input + "'";
    if (!seen.insert(p.input).second) return invalid_argument("input '" + p.input + "' has two profiles");
    const Value* input = nullptr;
    for (ValueId id : graph.inputs()) {
      if (graph.value(id).name == p.input) input = &graph.value(id);
    }
    if (input == nullptr) {
      std::string names;
      for (ValueId id : graph.inputs()) names += (names.empty() ? "" : ", ") + graph.value(id).name;
      return invalid_argument(where + ": the model has no such input (its inputs: " + names + ")");
    }
    if (p.min.size() != p.opt.size() || p.min.size() != p.max.size()) {
      return invalid_argument(where + ": min, opt and max differ in rank");
    }
    if (input->shape_known) {
      if (p.min.size() != input->shape.size()) {
        return invalid_argument(where + ": rank " + std::to_string(p.min.size()) + ", the input has shape " +
                                graph.shape_str(*input));
      }
      bool dynamic = false;
      for (size_t d = 0; d < input->shape.size(); ++d) {
        const int64_t fixed = input->shape[d];
        dynamic = dynamic || fixed < 0;
        if (fixed >= 0 && (p.min[d] != fixed || p.opt[d] != fixed || p.max[d] != fixed)) {
          return invalid_argument(where + ": dimension " + std::to_string(d) + " is fixed at " +
                                  std::to_string(fixed) + " (the input has shape " + graph.shape_str(*input) + ")");
        }
      }
      if (!dynamic) {
        return invalid_argument(where + ": the input's shape " + graph.shape_str(*input) +
                                " has no dynamic dimension");
      }
    }
    for (size_t d = 0; d < p.min.size(); ++d) {
      if (p.min[d] > p.opt[d] || p.opt[d] > p.max[d]) {
        return invalid_argument(where + ": dimension " + std::to_string(d) + " must satisfy min <= opt <= max (" +
                                std::to_string(p.min[d]) + ", " + std::to_string(p.opt[d]) + ", " +
                                std::to_string(p.max[d]) + ")");
      }
    }
  }
  return Status::ok();
}

Status input_profile_check(const InputProfile& profile, const Shape& shape) {
  bool inside = shape.size() == profile.min.size();
  for (size_t d = 0; inside && d < shape.size(); ++d) {
    inside = shape[d] >= profile.min[d] && shape[d] <= profile.max[d];
  }
  if (inside) return Status::ok();
  return invalid_argument("input '" + profile.input + "' has shape " + shape_to_string(shape) +
                          ", outside its profile: min " + shape_to_string(profile.min) + ", max " +
                          shape_to_string(profile.max));
}

nlohmann::json input_profiles_to_json(const std::vector<InputProfile>& profiles) {
  nlohmann::json list = nlohmann::json::array();
  for (const InputProfile& p : profiles) {
    list.push_back({{"input", p.input}, {"min", p.min}, {"opt", p.opt}, {"max", p.max}});
  }
  return list;
}

Expected<std::vector<InputProfile>> input_profiles_from_json(const nlohmann::json& json) {
  std::vector<InputProfile> out;
  if (json.is_null()) return out;
  try {
    for (const auto& j : json) {
      InputProfile p;
      p.input = j.at("input").get<std::string>();
      p.min = j.at("min").get<Shape>();
      p.opt = j.at("opt").get<Shape>();
      p.max = j.at("max").get<Shape>();
      if (p.min.size() != p.max.size() || p.opt.size() != p.max.size()) {
        return invalid_argument("the engine's profile of input '" + p.input + "' is malformed");
      }
      out.push_back(std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("the engine's input profiles are malformed: ") + e.what());
  }
  return out;
}

}  // namespace kiln::ir
