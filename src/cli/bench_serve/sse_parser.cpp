#include "cli/bench_serve/sse_parser.h"

namespace kiln::cli::bench_serve {

Status SseParser::feed(std::string_view bytes, const Callback& on_event) {
  if (failed_) return invalid_argument("event stream: a line was longer than the limit");
  size_t i = 0;
  if (at_start_ && !bytes.empty()) {
    // A UTF-8 byte-order mark may open the stream; it can itself arrive split, so wait for 3 bytes.
    line_.append(bytes);
    if (line_.size() < 3 && std::string_view("\xEF\xBB\xBF").substr(0, line_.size()) == line_) return Status::ok();
    at_start_ = false;
    std::string head = std::move(line_);
    line_.clear();
    if (head.rfind("\xEF\xBB\xBF", 0) == 0) head.erase(0, 3);
    return feed(head, on_event);
  }
  if (last_was_cr_ && i < bytes.size() && bytes[i] == '\n') ++i;
  last_was_cr_ = false;
  while (i < bytes.size()) {
    const size_t end = bytes.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(i));
      break;
    }
    line_.append(bytes.substr(i, end - i));
    process_line(on_event);
    if (bytes[end] == '\r') {
      if (end + 1 == bytes.size()) {
        last_was_cr_ = true;
        i = end + 1;
        break;
      }
      i = bytes[end + 1] == '\n' ? end + 2 : end + 1;
    } else {
      i = end + 1;
    }
  }
  if (line_.size() > max_line_bytes_) {
    failed_ = true;
    return invalid_argument("event stream: a line was longer than " + std::to_string(max_line_bytes_) + " bytes");
  }
  return Status::ok();
}

void SseParser::process_line(const Callback& on_event) {
  const std::string_view line(line_);
  process_field(line, on_event);
  line_.clear();
}

void SseParser::process_field(std::string_view line, const Callback& on_event) {
  if (line.empty()) {
    if (has_data_) {
      if (!pending_.data.empty() && pending_.data.back() == '\n') pending_.data.pop_back();
      on_event(std::move(pending_));
    }
    pending_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;
  const size_t colon = line.find(':');
  std::string_view field(line), value;
  if (colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    pending_.data.append(value);
    pending_.data.push_back('\n');
    has_data_ = true;
  } else if (field == "event") {
    pending_.event = std::string(value);
  } else if (field == "id") {
    pending_.id = std::string(value);
  }
}

}  // namespace kiln::cli::bench_serve
