// Server-sent events (the text/event-stream format of the HTML standard) parsed from a byte stream
// that arrives in arbitrary pieces: a line, a CRLF pair or a UTF-8 sequence may be split between
// two reads. Lines end in LF, CR or CRLF; "data:" lines of one event are joined with "\n"; comment
// lines (":...") and unknown fields are ignored; an event is dispatched at a blank line when it has
// data. The parser owns only the partial line and the event under construction; events are handed
// to the caller's callback, which may keep them.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kiln::cli::bench_serve {

struct SseEvent {
  std::string event;  // the "event:" field; empty means "message"
  std::string data;
  std::string id;
};

class SseParser {
 public:
  using Callback = std::function<void(SseEvent&&)>;
  explicit SseParser(size_t max_line_bytes = size_t{16} << 20) : max_line_bytes_(max_line_bytes) {}

  // Feeds the next bytes; calls `on_event` for each event they complete. A line longer than
  // max_line_bytes is an error (the stream is not SSE, or not one meant for us), and so is every
  // feed after it.
  Status feed(std::string_view bytes, const Callback& on_event);

  // True when bytes fed so far end inside a line or an event that was not dispatched yet.
  bool has_partial() const { return !line_.empty() || has_data_; }

 private:
  void process_line(const Callback& on_event);  // line_ holds one complete line
  void process_field(std::string_view line, const Callback& on_event);

  size_t max_line_bytes_;
  std::string line_;
  bool last_was_cr_ = false;  // a CR ended the previous piece: an LF right after it is the same line end
  bool at_start_ = true;      // a byte-order mark at the very start is skipped
  bool failed_ = false;
  SseEvent pending_;
  bool has_data_ = false;
};

}  // namespace kiln::cli::bench_serve
