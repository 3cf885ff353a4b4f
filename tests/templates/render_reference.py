#!/usr/bin/python3
"""Renders every chat template x conversation with Python jinja2 in the environment transformers'
apply_chat_template uses, and writes OUT_DIR/expected.jsonl for tests/unit/llm/jinja/chat_template_test.cpp.

Usage: /usr/bin/python3 tests/templates/render_reference.py OUT_DIR   (after setup.sh OUT_DIR)

The environment mirrors transformers.utils.chat_template_utils._compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension,
a {% generation %} tag that renders its body, tojson as json.dumps(ensure_ascii=False, ...), and the
globals raise_exception and strftime_now. The render call passes messages, tools (None when absent),
documents=None, add_generation_prompt, the special tokens the config defines and the extra context.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: transformers tracks assistant spans; the text is the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def load_template(entry, out_dir):
    """Returns (source, special_tokens, config_path_or_None, uses_config_loader)."""
    config = None
    if "config" in entry:
        with open(os.path.join(out_dir, entry["config"]), encoding="utf-8") as f:
            config = json.load(f)
    if "file" in entry:
        with open(os.path.join(HERE, "templates", entry["file"]), encoding="utf-8") as f:
            source = f.read()
        if config is not None:
            tokens = {"bos_token": token_text(config.get("bos_token")) or "",
                      "eos_token": token_text(config.get("eos_token")) or ""}
        else:
            tokens = {"bos_token": entry["bos_token"], "eos_token": entry["eos_token"]}
        return source, tokens, False
    source = config["chat_template"]
    if isinstance(source, list):
        source = next(t["template"] for t in source if t["name"] == "default")
    tokens = {}
    for key in SPECIAL_TOKENS:
        text = token_text(config.get(key))
        if isinstance(text, str):
            tokens[key] = text
    return source, tokens, True


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: render_reference.py OUT_DIR")
    out_dir = sys.argv[1]
    env = make_environment()
    with open(os.path.join(HERE, "templates.json"), encoding="utf-8") as f:
        templates = json.load(f)
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    count = 0
    with open(os.path.join(out_dir, "expected.jsonl"), "w", encoding="utf-8") as out:
        for entry in templates:
            source, tokens, from_config = load_template(entry, out_dir)
            template = env.from_string(source)
            for conv in conversations:
                extra = dict(entry.get("context", {}))
                extra.update(conv.get("extra_context", {}))
                record = {
                    "template": entry["name"],
                    "conversation": conv["id"],
                    "config": entry["config"] if from_config else None,
                    "source": None if from_config else source,
                    "bos_token": tokens.get("bos_token"),
                    "eos_token": tokens.get("eos_token"),
                    "messages": conv["messages"],
                    "tools": conv.get("tools"),
                    "add_generation_prompt": conv["add_generation_prompt"],
                    "extra_context": extra,
                }
                kwargs = dict(tokens)
                kwargs.update(extra)
                try:
                    record["expected"] = template.render(messages=conv["messages"], tools=conv.get("tools"),
                                                         documents=None,
                                                         add_generation_prompt=conv["add_generation_prompt"],
                                                         **kwargs)
                except jinja2.exceptions.TemplateError as e:
                    record["error"] = str(e)
                    record["raised"] = type(e) is jinja2.exceptions.TemplateError
                except Exception as e:  # noqa: BLE001 - a Python-side failure the C++ side must also report
                    record["error"] = str(e)
                    record["raised"] = False
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    print(f"wrote {count} reference renders to {os.path.join(out_dir, 'expected.jsonl')}")


if __name__ == "__main__":
    main()
