// The reference data tests/parity/setup.sh and tests/parity/sentencepiece/setup.sh write to
// $KILN_PARITY_DIR (vocabularies, models, expected ids), for the tokenizer tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::testing {

// $KILN_PARITY_DIR, or "" when it is not set.
inline std::string parity_dir() {
  const char* dir = std::getenv("KILN_PARITY_DIR");
  return dir == nullptr ? std::string() : std::string(dir);
}

// The whole file at `path`, or "" when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The contents of $KILN_PARITY_DIR/name; a test failure (never a skip) when it is missing.
inline std::string parity_file(const std::string& name) {
  const std::string dir = parity_dir();
  if (dir.empty()) {
    ADD_FAILURE() << "KILN_PARITY_DIR is not set: run tests/parity/sentencepiece/setup.sh OUT_DIR and set "
                     "KILN_PARITY_DIR=OUT_DIR";
    return {};
  }
  std::ifstream in(dir + "/" + name, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "missing " << dir << "/" << name << ": run tests/parity/sentencepiece/setup.sh " << dir;
    return {};
  }
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace kiln::testing
