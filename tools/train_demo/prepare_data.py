#!/usr/bin/env python3
"""Builds the demo model's training and held-out text from public-domain English books.

Inputs (one plain-text file each, see README.md for the Debian packages they come from):
  austen_6_novels.txt, world_english_bible.txt, moby_dick.txt, sherlock_holmes.txt

Outputs:
  OUT/train/<book>.txt      cleaned training text, one file per book (9 books)
  OUT/heldout/<book>.txt    the contiguous held-out tail of each book (~2% of its text)
  OUT/stats.json            characters per book and split
  HELDOUT                   all held-out tails joined by blank lines (models/demo/heldout.txt)

Cleaning: Project Gutenberg headers and licence text are cut, hard-wrapped lines are joined into
one line per paragraph (paragraphs separated by one blank line), _italic_ underscores are
dropped, curly quotes become straight quotes and the em dash becomes "--" (the Gutenberg
spelling), runs of spaces collapse. The Bible keeps one verse per line; its preface and glossary
are dropped, book titles stand in paragraphs of their own, and words glued together where the
source's footnote markers were stripped ("Godcreated") are split again.

Uses only the Python standard library. Deterministic: same inputs, same outputs.
"""
import argparse
import collections
import json
import os
import re
import sys

HELDOUT_FRACTION = 0.02

AUSTEN_TITLES = ["EMMA", "MANSFIELD PARK", "NORTHANGER ABBEY", "Persuasion", "PRIDE AND PREJUDICE",
                 "SENSE AND SENSIBILITY"]

# A chapter-like heading: the held-out split prefers to start at one of these.
HEADING_RE = re.compile(r"^(CHAPTER|Chapter|ADVENTURE|The .*(Book|Gospel|Letter|Revelation|Acts|Psalms))\b")


def read(path):
    with open(path, encoding="utf-8-sig") as f:
        return f.read().replace("\r\n", "\n")


def normalise_chars(text):
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    text = text.replace("\u2014", "--")
    text = re.sub(r"_([^_\n]+)_", r"\1", text)
    text = text.replace("_", "")
    return text


def unwrap(text):
    """Hard-wrapped prose -> list of paragraphs, one line each."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.split("\n") if line.strip()]
        if lines:
            paragraphs.append(re.sub(r"\s+", " ", " ".join(lines)))
    return paragraphs


def gutenberg_body(text, first_line):
    """Text between the Gutenberg START/END markers, from the line starting `first_line` on."""
    start = text.index("*** START OF THIS PROJECT GUTENBERG EBOOK")
    end = text.index("*** END OF THIS PROJECT GUTENBERG EBOOK")
    body = text[start:end]
    body = body[body.index("\n" + first_line) + 1:]
    tail = re.search(r"\nEnd of (the )?Project Gutenberg", body)
    if tail:
        body = body[:tail.start()]
    return body


def austen_novels(text):
    lines = text.split("\n")
    starts = []
    for title in AUSTEN_TITLES:
        idx = [i for i, line in enumerate(lines) if line.strip() == title]
        if not idx:
            sys.exit(f"prepare_data: Austen title {title!r} not found; is this the janeaustenr text?")
        starts.append(idx[0])
    starts.append(len(lines))
    novels = {}
    for k, title in enumerate(AUSTEN_TITLES):
        name = "austen_" + title.lower().replace(" ", "_")
        novels[name] = "\n".join(lines[starts[k]:starts[k + 1]])
    return novels


def fix_glued_words(verses, other_text):
    """Splits words that the source's stripped footnote markers glued together.

    A word is split into a+b when it occurs at most twice in the Bible and never in the novels,
    a is a frequent word and b is one of the 150 most frequent words (or any common word after a
    divine name). Known real words are kept."""
    keep = {"canon", "sundown", "donor", "areas", "causeway", "faraway", "homeland", "makeup", "outcome",
            "Thisbe", "nearby", "freeman", "freemen", "forevermore", "Josephus", "fatherland", "manan"}
    names = {"God", "Yahweh", "Lord", "Spirit", "Jesus", "Christ"}
    bible_text = "\n".join(verses)
    counts = collections.Counter(re.findall(r"[A-Za-z]+", bible_text + other_text))
    novel_counts = collections.Counter(re.findall(r"[A-Za-z]+", other_text))
    top = {w for w, _ in counts.most_common(150)}
    fixes = {}
    for word, n in collections.Counter(re.findall(r"[A-Za-z]+", bible_text)).items():
        if n > 2 or novel_counts[word] or word in keep:
            continue
        for i in range(3, len(word) - 1):
            a, b = word[:i], word[i:]
            if counts[a] >= 200 and (b in top or (a in names and counts[b] >= 30)):
                fixes[word] = a + " " + b
                break
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(fixes))) + r")\b")
    return [pattern.sub(lambda m: fixes[m.group(1)], v) for v in verses], fixes


def bible_paragraphs(text, novels_text):
    lines = text.split("\n")
    if not lines[0].startswith("Preface to the World English Bible"):
        sys.exit("prepare_data: world_english_bible.txt does not start with the WEB preface")
    lines = lines[1:]
    last = lines[-1]
    cut = last.find("World English Bible Glossary")
    if cut >= 0:
        lines[-1] = last[:cut]
    verses = [re.sub(r"\s+", " ", normalise_chars(line)).strip() for line in lines]
    verses = [v for v in verses if v]
    verses, fixes = fix_glued_words(verses, novels_text)
    # Book titles ("The Book of Ruth", "BOOK 1" in Psalms) become paragraphs of their own.
    paragraphs, current = [], []
    for v in verses:
        is_title = (len(v) < 80 and not re.search(r"[.,;:?!'\")-]$", v)
                    and (HEADING_RE.match(v) or re.match(r"^BOOK \d+$", v)))
        if is_title:
            if current:
                paragraphs.append("\n".join(current))
            paragraphs.append(v)
            current = []
        else:
            current.append(v)
    if current:
        paragraphs.append("\n".join(current))
    # Long books -> paragraphs of at most ~40 verses so the held-out cut can fall inside a book.
    out = []
    for p in paragraphs:
        vs = p.split("\n")
        for i in range(0, len(vs), 40):
            out.append("\n".join(vs[i:i + 40]))
    return out, fixes


def split_heldout(paragraphs):
    """-> (train paragraphs, held-out paragraphs): the held-out part is a contiguous tail of ~2%.
    It starts at the last chapter heading whose tail is at most 4% of the book, else at the first
    paragraph whose tail is at most 2%."""
    sizes = [len(p) + 2 for p in paragraphs]
    total = sum(sizes)
    tail, cut = 0, len(paragraphs)
    while cut > 0 and tail + sizes[cut - 1] <= total * HELDOUT_FRACTION:
        cut -= 1
        tail += sizes[cut]
    j = cut
    while j > 0 and tail + sizes[j - 1] <= total * 2 * HELDOUT_FRACTION and not HEADING_RE.match(paragraphs[j]):
        j -= 1
        tail += sizes[j]
    if j < len(paragraphs) and HEADING_RE.match(paragraphs[j]):
        cut = j
    return paragraphs[:cut], paragraphs[cut:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpora", required=True, help="folder with the four source .txt files")
    ap.add_argument("--out", required=True, help="output folder (e.g. .train_data)")
    ap.add_argument("--heldout", required=True, help="where to write all held-out text (models/demo/heldout.txt)")
    args = ap.parse_args()

    src = {name: read(os.path.join(args.corpora, name + ".txt"))
           for name in ["austen_6_novels", "world_english_bible", "moby_dick", "sherlock_holmes"]}

    books = {}
    for name, text in austen_novels(src["austen_6_novels"]).items():
        books[name] = unwrap(normalise_chars(text))
    books["moby_dick"] = unwrap(normalise_chars(gutenberg_body(src["moby_dick"], "ETYMOLOGY.")))
    books["sherlock_holmes"] = unwrap(normalise_chars(gutenberg_body(src["sherlock_holmes"], "ADVENTURE I.")))
    novels_text = "\n\n".join("\n\n".join(p) for p in books.values())
    books["world_english_bible"], fixes = bible_paragraphs(src["world_english_bible"], novels_text)

    os.makedirs(os.path.join(args.out, "train"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "heldout"), exist_ok=True)
    stats = {"books": {}, "glued_words_split": len(fixes)}
    heldout_all = []
    for name, paragraphs in books.items():
        train, held = split_heldout(paragraphs)
        train_text = "\n\n".join(train) + "\n"
        held_text = "\n\n".join(held) + "\n"
        with open(os.path.join(args.out, "train", name + ".txt"), "w", encoding="utf-8") as f:
            f.write(train_text)
        with open(os.path.join(args.out, "heldout", name + ".txt"), "w", encoding="utf-8") as f:
            f.write(held_text)
        heldout_all.append(held_text)
        stats["books"][name] = {"train_chars": len(train_text), "heldout_chars": len(held_text),
                                "heldout_starts_with": held[0][:60]}
    with open(args.heldout, "w", encoding="utf-8") as f:
        f.write("\n".join(heldout_all))
    stats["train_chars"] = sum(b["train_chars"] for b in stats["books"].values())
    stats["heldout_chars"] = sum(b["heldout_chars"] for b in stats["books"].values())
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
