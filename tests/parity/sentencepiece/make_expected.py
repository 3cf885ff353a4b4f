#!/usr/bin/python3
"""Writes the reference token ids of the Llama-2 SentencePiece model for Kiln's parity test.

Usage: make_expected.py MODEL OUT_JSONL [CORPUS_JSONL]

The reference is Debian's python3-sentencepiece: ids = encode(text) with BOS in front (what
Llama-2's tokenizer does with add_special_tokens), decoded = decode(ids). Each output line is
{"text": ..., "ids": [...], "decoded": ...}; inputs that are not valid UTF-8 carry "text_hex"
(the bytes in hex) instead of "text". The texts are the shared corpus (one JSON string, or an
object with "text", per line) when it exists, plus the cases below, which aim at SentencePiece's
corners: the dummy-prefix space, runs of whitespace, byte fallback (rare characters, emoji,
ZWJ sequences), combining marks, text that looks like control tokens, and invalid UTF-8.
"""
import json
import sys

import sentencepiece as spm

CASES = [
    "", " ", "  ", "\n", "\t", "\r\n", "a", " a", "a ", "  two leading", "trailing two  ",
    "Hello world", "Hello, world! How are you today?", "multiple   inner    spaces",
    "line one\nline two\n\nline four", "tabs\tand\ttabs", "mixed \t \n whitespace",
    "The quick brown fox jumps over the lazy dog.", "I'm can't won't they're",
    "1234567890 3.14159 -42 1e10 0x1F", "$100.00 (approx.) 50% off!", "email@example.com https://example.org/path?q=1",
    "def f(x):\n    return x * 2  # comment\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<s>", "</s>", "<unk>", "<s>hi</s>", "text <s> in the middle", "\u2581leading visible space", "a\u2581b",
    "你好，世界！", "我们今天去公园散步吧。", "日本語のテキストです。カタカナとひらがな。", "한국어 텍스트입니다.",
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "ሰላም ልዑል", "Xin chào thế giới", "Ṫëṡṫ ẅïṫḧ ḋïäċṙïṫïċṡ", "e\u0301 a\u0300 o\u0308 n\u0303", "Z\u0351\u036b\u0343a\u0352l\u0310g\u0357o",
    "🤗", "🤗🤗🤗", "Hello 🤗 world", "👩‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 thumbs", "🇯🇵🇺🇸 flags",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "𒀀𒀁 cuneiform", "\U0001F600\U0001F601\U0001F602", "emoji at end 🚀",
    "\u00a0non-breaking\u00a0space", "\u3000ideographic space", "zero\u200bwidth\u200bspace", "\ufeffBOM",
    "\u0000nul byte", "control \u0001\u0002\u001f chars", "\ufffd replacement char", "\U0010ffff last code point",
    "ﬁ ligature ① circled Ａ fullwidth", "x" * 300, "ab " * 200, "The end.",
]

BYTE_CASES = [b"\xffabc", b"a\xc3", b"\xe4\xbd", b"\xed\xa0\x80", b"\xc0\xaf", b"ok\x80\x80ok", b"\xf0\x9f\xa4"]


def corpus_texts(path):
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            item = json.loads(line)
            texts.append(item if isinstance(item, str) else item["text"])
    return texts


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
    texts = list(CASES)
    if len(sys.argv) == 4:
        texts += corpus_texts(sys.argv[3])
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        for text in texts:
            ids = [sp.bos_id()] + sp.encode(text)
            row = {"text": text, "ids": ids, "decoded": sp.decode(ids)}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        for raw in BYTE_CASES:
            ids = [sp.bos_id()] + sp.encode(raw)
            row = {"text_hex": raw.hex(), "ids": ids, "decoded": sp.decode(ids)}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(texts) + len(BYTE_CASES)} cases -> {sys.argv[2]}")


if __name__ == "__main__":
    main()
