// The ONNX reader: a model.onnx file (IR versions up to 10, default-domain opsets up to 18) becomes
// an ir::Graph of general tensor ops. Initializers and Constant nodes become weights (decoded once,
// held by the weight loaders until the engine writer runs them), external data files are read
// from beside the model, and dim_param names become the graph's named symbolic dimensions.
//
// Errors: a file that is not a readable ONNX model (missing, truncated, malformed, too new) is an
// error. Nodes Kiln cannot translate are not: they are listed in OnnxImport::unsupported, one entry
// per node with the reason, so that `kiln check` can report all of them; `kiln build` refuses a
// model with any (onnx_import_require_supported()).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::formats {

inline constexpr int64_t kOnnxMaxIrVersion = 10;
inline constexpr int64_t kOnnxMaxOpset = 18;

struct OnnxUnsupported {
  std::string node;     // the node's name (or OpType_index when it has none)
  std::string op_type;
  std::string domain;   // "ai.onnx" for the default domain
  int64_t opset = 0;
  std::string reason;   // one line: unsupported op / attribute / dtype / ...
  std::string line() const;  // "node 'N' (Op, ai.onnx opset 13): reason"
};

struct OnnxImport {
  ir::Graph graph;
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain -> version
  std::string producer;                   // producer_name and version
  std::vector<OnnxUnsupported> unsupported;
};

// Reads and translates the model at `path`.
Expected<OnnxImport> onnx_import_file(const std::string& path);
// The same from bytes in memory; external data is looked up under `base_dir`.
Expected<OnnxImport> onnx_import_bytes(const std::string& bytes, const std::string& base_dir,
                                       const std::string& display_name);

// The graph, or an error naming the first unsupported node (and how many more there are).
Expected<ir::Graph> onnx_import_require_supported(OnnxImport import);

// True when `path` names an ONNX model file (by its extension).
bool is_onnx_path(const std::string& path);

}  // namespace kiln::formats
