// Loader for OpenAI tiktoken encodings: a .tiktoken rank file (each line "base64(token bytes)
// rank"), the encoding's split pattern and its special tokens. Encoding follows tiktoken: split
// with the pattern, then merge bytes by lowest rank of the merged byte string. Special-token
// text in the input is always recognized (tiktoken's allowed_special="all"); there is no BOS,
// so add_special_tokens changes nothing. The tokenizer is immutable and thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm {

// Published parameters of tiktoken's cl100k_base and o200k_base encodings.
inline constexpr const char* kTiktokenCl100kPattern =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s";
inline constexpr const char* kTiktokenO200kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
std::map<std::string, int32_t> tiktoken_cl100k_special_tokens();
std::map<std::string, int32_t> tiktoken_o200k_special_tokens();

Expected<std::unique_ptr<Tokenizer>> tiktoken_tokenizer(std::string_view tiktoken_file, std::string_view pattern,
                                                        const std::map<std::string, int32_t>& special_tokens);

}  // namespace kiln::llm
