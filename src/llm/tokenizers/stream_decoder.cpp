#include "llm/tokenizers/stream_decoder.h"

namespace kiln::llm {

bool utf8_tail_is_unfinished(std::string_view text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  if (text.size() >= kReplacement.size() && text.substr(text.size() - kReplacement.size()) == kReplacement) {
    return true;
  }
  // Look back over at most three continuation bytes for the lead byte of the last sequence.
  const size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back;
  }
  return false;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

Expected<std::string> StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  Expected<std::string> text = tokenizer_.decode(ids_, skip_special_tokens_);
  if (!text) {
    ids_.pop_back();
    return text.status();
  }
  // Emit only what extends the text already emitted from this window. (A decoder that rewrote
  // earlier text could not be streamed exactly; the tokenizers here never do.)
  if (text->size() <= read_text_.size() || text->compare(0, read_text_.size(), read_text_) != 0 ||
      utf8_tail_is_unfinished(*text)) {
    return std::string();
  }
  std::string out = text->substr(read_text_.size());
  // Move the window start to the first token of the text just emitted (see the header).
  if (read_ > 0) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_));
    Expected<std::string> window = tokenizer_.decode(ids_, skip_special_tokens_);
    if (!window) return window.status();  // unreachable: these ids decoded a moment ago
    read_text_ = std::move(*window);
  } else {
    read_text_ = std::move(*text);
  }
  read_ = ids_.size();
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  Expected<std::string> text = tokenizer_.decode(ids_, skip_special_tokens_);
  if (text && text->size() > read_text_.size() && text->compare(0, read_text_.size(), read_text_) == 0) {
    out = text->substr(read_text_.size());
  }
  ids_.clear();
  read_ = 0;
  read_text_.clear();
  return out;
}

}  // namespace kiln::llm
