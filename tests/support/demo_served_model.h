// The bundled demo model's tokenizer, chat template and generation config (models/demo) as a
// ServedModel, as an engine would carry them: for tests of the protocol code that run no model.
// KILN_SOURCE_DIR names the source tree.
#pragma once

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "server/generation/served_model.h"

namespace kiln::testing {

inline std::string read_source_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The demo model's files, name "demo", a 512-token context and an 8192-token vocabulary.
inline Expected<server::ServedModel> demo_served_model() {
  std::map<std::string, std::string> files;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    files[f] = read_source_file(std::string(KILN_SOURCE_DIR) + "/models/demo/" + f);
  }
  return server::served_model_from_files(files, "demo", 512, 8192, std::nullopt);
}

}  // namespace kiln::testing
