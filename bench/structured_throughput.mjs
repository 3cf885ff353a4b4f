// Decode throughput with a JSON Schema per request against without one, at a batch of B (16 by
// default): B clients in a closed loop on one `kiln serve` (--max-num-seqs B), each sending chat
// requests back to back for S seconds a round. Constrained rounds send a schema of its own with
// each request (schemaFor below: a new seed each request, so most compile cold); plain rounds
// send the same prompt with ignore_eos and max_tokens set to the constrained rounds' mean output
// length, so that both spend the same share of their time on prompts. Rounds alternate
// (constrained, plain, ...) so that a noisy machine moves both. Prints each round's output
// tokens/s, the medians and their ratio.
// DISTINCT (0 by default: every request's schema is new) cycles the seeds over that many schemas
// instead, as a service whose clients send a few schemas again and again (compiled once, cached).
// Usage: node bench/structured_throughput.mjs KILN [ROUNDS=3] [SECONDS=20] [BATCH=16] [DISTINCT=0] [ENGINE]
import os from 'node:os';
import { generateSchema } from '../tests/e2e/schema_generator.mjs';
import { startKiln } from './kiln_server.mjs';

const [kiln, roundsText = '3', secondsText = '20', batchText = '16', distinctText = '0', engine = ''] = process.argv.slice(2);
if (!kiln) {
  console.error('usage: node bench/structured_throughput.mjs KILN [ROUNDS] [SECONDS] [BATCH] [DISTINCT] [ENGINE]');
  process.exit(2);
}
const rounds = Number(roundsText), seconds = Number(secondsText), batch = Number(batchText), distinct = Number(distinctText);
const MAX_TOKENS = 128;

const { server, base } = await startKiln(kiln, ['serve', ...(engine ? [engine] : []), '--host', '127.0.0.1', '--port', '0', '--threads', '2',
  '--max-num-seqs', String(batch)]);

// A typical schema of its own for each request: a generated schema (tests/e2e/schema_generator.mjs)
// as one property of a record whose other fields are bounded strings and a list, so that outputs
// run to tens of tokens rather than a bare number or enum.
function schemaFor(seed) {
  const { $defs, ...value } = generateSchema(seed);  // its $defs move to the root, where its $refs point
  return {
    ...($defs ? { $defs } : {}),
    type: 'object',
    properties: {
      [`title_${seed % 97}`]: { type: 'string', minLength: 12, maxLength: 40 },
      tags: { type: 'array', items: { type: 'string', minLength: 3, maxLength: 12 }, minItems: 2, maxItems: 4 },
      value,
      rating: { type: 'integer', minimum: 1, maximum: 5 },
    },
    required: [`title_${seed % 97}`, 'tags', 'value', 'rating'],
    additionalProperties: false,
  };
}

let nextSeed = 0;
async function request(constrained, plainTokens) {
  const seed = nextSeed++;
  const body = { messages: [{ role: 'user', content: 'Reply with a JSON value.' }], temperature: 1, seed };
  if (constrained) {
    body.max_tokens = MAX_TOKENS;
    body.response_format = { type: 'json_schema', json_schema: { name: `s${seed}`, schema: schemaFor(distinct ? seed % distinct : seed), strict: true } };
  } else {
    body.max_tokens = plainTokens;
    body.ignore_eos = true;
  }
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const j = await res.json();
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${JSON.stringify(j)}`);
  return j.usage.completion_tokens;
}

// One round: output tokens/s and requests finished.
async function round(constrained, plainTokens) {
  const end = Date.now() + seconds * 1000;
  const start = Date.now();
  let tokens = 0, requests = 0;
  await Promise.all(Array.from({ length: batch }, async () => {
    while (Date.now() < end) {
      const n = await request(constrained, plainTokens);  // awaited before the sum reads `tokens`
      tokens += n;
      ++requests;
    }
  }));
  return { rate: tokens / ((Date.now() - start) / 1000), tokens, requests };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`cpu: ${os.cpus()[0].model}, ${os.cpus().length} cores; batch ${batch}, ${rounds} rounds of ${seconds} s each; ` +
  (distinct ? `schemas cycle over ${distinct}` : 'a new schema every request'));
await round(true, 0);  // warm-up: first grammars, the vocabulary's trie
const constrained = [], plain = [];
let meanLength = 0;
for (let r = 0; r < rounds; ++r) {
  const c = await round(true, 0);
  constrained.push(c.rate);
  meanLength = Math.max(1, Math.round(c.tokens / c.requests));
  const p = await round(false, meanLength);
  plain.push(p.rate);
  console.log(`round ${r + 1}: schema ${c.rate.toFixed(1)} tokens/s (${c.requests} requests, mean ${meanLength} tokens); ` +
    `plain ${p.rate.toFixed(1)} tokens/s (${p.requests} requests of ${meanLength})`);
}
server.kill('SIGTERM');
const ratio = median(constrained) / median(plain);
console.log(`median: schema ${median(constrained).toFixed(1)}, plain ${median(plain).toFixed(1)} tokens/s; ratio ${ratio.toFixed(3)}`);
