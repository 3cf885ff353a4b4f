// Structured-output fidelity: N generated JSON Schemas (tests/e2e/schema_generator.mjs, seeds
// 0..N-1) through response_format json_schema on `kiln serve`, each output judged by ajv with
// ajv-formats; half of the requests streamed. Prints every failure, then how many outputs were
// complete (finish_reason stop), how many of those parsed and validated, how many were cut by
// max_tokens, the tokens generated and the wall time.
// Usage: node bench/structured_fidelity.mjs KILN E2E_DIR [N=1000] [ENGINE] [MAX_TOKENS=256] [CONCURRENCY=8]
import { createRequire } from 'node:module';
import path from 'node:path';
import { generateSchema } from '../tests/e2e/schema_generator.mjs';
import { startKiln } from './kiln_server.mjs';

const [kiln, e2eDir, n = '1000', engine = '', maxTokensText = '256', concurrencyText = '8'] = process.argv.slice(2);
if (!kiln || !e2eDir) {
  console.error('usage: node bench/structured_fidelity.mjs KILN E2E_DIR [N] [ENGINE] [MAX_TOKENS] [CONCURRENCY]');
  process.exit(2);
}
const count = Number(n), maxTokens = Number(maxTokensText), concurrency = Number(concurrencyText);
const require = createRequire(path.join(e2eDir, 'package.json'));
const Ajv = require('ajv');
const addFormats = require('ajv-formats');
const ajv = new (Ajv.default ?? Ajv)({ strict: false, allErrors: true });
(addFormats.default ?? addFormats)(ajv);

const { server, base } = await startKiln(kiln, ['serve', ...(engine ? [engine] : []), '--host', '127.0.0.1', '--port', '0', '--threads', '2',
  '--max-num-seqs', String(2 * concurrency)]);

async function run(seed) {
  const schema = generateSchema(seed);
  const stream = seed % 2 === 1;
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: 'Reply with a JSON value.' }], max_tokens: maxTokens, temperature: 1, seed, stream,
      stream_options: stream ? { include_usage: true } : undefined,
      response_format: { type: 'json_schema', json_schema: { name: `s${seed}`, schema, strict: true } },
    }),
  });
  const body = await res.text();
  if (res.status !== 200) return { seed, schema, error: `HTTP ${res.status}: ${body}` };
  if (!stream) {
    const j = JSON.parse(body);
    return { seed, schema, text: j.choices[0].message.content, finish: j.choices[0].finish_reason, tokens: j.usage.completion_tokens };
  }
  let text = '', finish = null, tokens = 0;
  for (const line of body.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6));
    for (const c of chunk.choices ?? []) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
  }
  return { seed, schema, text, finish, tokens };
}

const start = Date.now();
let complete = 0, valid = 0, cut = 0, errors = 0, tokens = 0;
for (let i = 0; i < count; i += concurrency) {
  const seeds = [];
  for (let s = i; s < Math.min(count, i + concurrency); ++s) seeds.push(s);
  for (const r of await Promise.all(seeds.map(run))) {
    if (r.error) {
      ++errors;
      console.log(`seed ${r.seed}: ${r.error}`);
      continue;
    }
    tokens += r.tokens;
    if (r.finish !== 'stop') {
      ++cut;
      continue;
    }
    ++complete;
    let value;
    try {
      value = JSON.parse(r.text);
    } catch (e) {
      console.log(`seed ${r.seed}: not JSON (${e.message}): ${r.text}`);
      continue;
    }
    const validate = ajv.compile(r.schema);
    if (validate(value)) {
      ++valid;
    } else {
      console.log(`seed ${r.seed}: invalid ${JSON.stringify(validate.errors)}\n  schema ${JSON.stringify(r.schema)}\n  output ${r.text}`);
    }
  }
}
const seconds = (Date.now() - start) / 1000;
server.kill('SIGTERM');
console.log(`schemas ${count}: complete ${complete}, valid ${valid} of ${complete} (${(100 * valid / Math.max(1, complete)).toFixed(2)}%), ` +
  `cut by max_tokens ${cut}, errors ${errors}`);
console.log(`generated tokens ${tokens} in ${seconds.toFixed(1)} s (${(tokens / seconds).toFixed(1)} tokens/s), max_tokens ${maxTokens}, concurrency ${concurrency}`);
process.exit(valid === complete && errors === 0 ? 0 : 1);
