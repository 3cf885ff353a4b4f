#!/usr/bin/env python3
"""Trains the demo model's byte-level BPE tokenizer (vocabulary 8192) on the training text.

Writes into OUT_DIR:
  tokenizer.json          Hugging Face tokenizers format: GPT-2 style byte-level BPE, no normaliser,
                          a post-processor that puts <s> (BOS) in front of every encoded text
  tokenizer_config.json   bos/eos tokens, add_bos_token, model_max_length

Needs the Python `tokenizers` package (0.23.2 was used). Only the training split is read, so
the held-out text stays unseen.
"""
import argparse
import glob
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS = "<s>", "</s>"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-dir", required=True, help="folder of training .txt files (prepare_data.py's OUT/train)")
    ap.add_argument("--out-dir", required=True, help="model folder to write the tokenizer files into")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--max-length", type=int, default=512, help="model_max_length in tokenizer_config.json")
    args = ap.parse_args()

    files = sorted(glob.glob(os.path.join(args.train_dir, "*.txt")))
    if not files:
        raise SystemExit(f"train_tokenizer: no .txt files in {args.train_dir}")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, min_frequency=2, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    os.makedirs(args.out_dir, exist_ok=True)
    tok.save(os.path.join(args.out_dir, "tokenizer.json"))

    special = {"content": None, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
               "special": True}
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(bos_id): dict(special, content=BOS), str(eos_id): dict(special, content=EOS)},
        "bos_token": BOS,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": args.max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    sample = "It is a truth universally acknowledged"
    enc = tok.encode(sample)
    print(f"tokenizer: vocab {tok.get_vocab_size()}, bos {bos_id}, eos {eos_id}; {sample!r} -> {enc.tokens}")


if __name__ == "__main__":
    main()
