// Encode throughput of the Hugging Face tokenizers binding on the same input as
// bench/bench_tokenizer.cpp: the parity corpus repeated to about 4 MB, without special tokens.
// Two figures: one awaited encode() per string (includes the binding's per-call cost), and
// encodeBatch() over 1000 strings at a time with TOKENIZERS_PARALLELISM=false, i.e. on one
// thread, which is the fair comparison with Kiln's single-threaded loop.
// Usage: node bench_tokenizers.mjs OUT_DIR (the folder tests/parity/setup.sh wrote).
process.env.TOKENIZERS_PARALLELISM = 'false';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');
const out = process.argv[2];
if (!out) {
  console.error('usage: node bench_tokenizers.mjs OUT_DIR');
  process.exit(2);
}
const base = readFileSync(join(out, 'llama3.expected.jsonl'), 'utf8')
  .split('\n')
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l).text);
const texts = [];
let bytes = 0;
while (bytes < 4 << 20) {
  for (const s of base) {
    texts.push(s);
    bytes += Buffer.byteLength(s, 'utf8');
  }
}

for (const name of ['llama3', 'qwen3', 'mistral']) {
  const tokenizer = Tokenizer.fromFile(join(out, 'files', name, 'tokenizer.json'));
  for (const s of texts.slice(0, base.length)) await tokenizer.encode(s, null, { addSpecialTokens: false });  // warm up
  let tokens = 0;
  const start = process.hrtime.bigint();
  for (const s of texts) tokens += (await tokenizer.encode(s, null, { addSpecialTokens: false })).getLength();
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  let batchTokens = 0;
  const batchStart = process.hrtime.bigint();
  for (let i = 0; i < texts.length; i += 1000) {
    const encodings = await tokenizer.encodeBatch(texts.slice(i, i + 1000), { addSpecialTokens: false });
    for (const e of encodings) batchTokens += e.getLength();
  }
  const batchSeconds = Number(process.hrtime.bigint() - batchStart) / 1e9;
  const mib = (s) => (bytes / s / (1 << 20)).toFixed(2);
  console.log(`${name.padEnd(8)} encode: ${mib(seconds)} MiB/s (${(tokens / seconds / 1e6).toFixed(2)} M tokens/s)` +
    `  encodeBatch, 1 thread: ${mib(batchSeconds)} MiB/s (${(batchTokens / batchSeconds / 1e6).toFixed(2)} M tokens/s)`);
}
