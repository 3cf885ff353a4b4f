// JsonDepth: walks JSON text a byte at a time, knowing whether it is inside a string and how deep
// it is in arrays and objects, so that a reader can find where a value ends, or how deeply a
// text nests, without parsing it (and without recursion).
#pragma once

namespace kiln {

class JsonDepth {
 public:
  // The nesting depth after `c`; brackets inside strings do not count.
  int step(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '[' || c == '{') {
      ++depth_;
    } else if (c == ']' || c == '}') {
      --depth_;
    }
    return depth_;
  }
  bool in_string() const { return in_string_; }

 private:
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
};

}  // namespace kiln
