// StreamDecoder: turns token ids generated one at a time into text, for streaming responses.
// Each push returns the text that became final with that id, never part of a UTF-8 character,
// and the pieces returned by every push plus finish() concatenate to exactly
// tokenizer.decode(all ids, skip_special_tokens).
//
// How: decoding is local except at the start of the text (SentencePiece drops the space of the
// first "▁", Hugging Face's Strip and Metaspace decoders do the same) and inside a multi-byte
// character split over several tokens (byte fallback, byte-level BPE). So the decoder decodes a
// short window that starts at a token whose text was already emitted, and emits what the newest
// id adds to the window's text once that no longer ends in U+FFFD or an incomplete UTF-8
// sequence. The window then moves to the first token of the text just emitted: it follows
// finished text, and whatever token of the window the start-of-text rule strips is one whose
// text both decodes share, so the difference is what the full decode would add.
//
// A generated U+FFFD (an invalid byte sequence, or a U+FFFD token) is held back until a later
// token or finish() makes it final, so the text never contains a replacement character that a
// later byte would have completed.
//
// The decoder borrows `tokenizer`, which must outlive it. One decoder serves one sequence from
// one thread; use one per sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Text that became final with `id` ("" if none yet). An id outside the vocabulary is an
  // error and leaves the decoder as it was.
  Expected<std::string> push(int32_t id);

  // Whatever is left: incomplete bytes become U+FFFD as the one-shot decode makes them. The
  // decoder is then empty again, ready for a new text.
  std::string finish();

  // How many ids the next push decodes: the ids since the start of the last emitted text. A
  // few, unless many ids in a row leave the text unfinished.
  size_t window_size() const { return ids_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // the window: ids from the window start up to the newest
  size_t read_ = 0;           // ids_[0, read_) are emitted; their text is read_text_
  std::string read_text_;     // decode(ids_[0, read_))
};

// Whether `text` ends in U+FFFD or in the first bytes of a UTF-8 sequence that more bytes would
// complete: text a later token may still change.
bool utf8_tail_is_unfinished(std::string_view text);

}  // namespace kiln::llm
