// End-to-end tests of structured outputs: the real openai client against `kiln serve` on the demo
// model, with ajv (and ajv-formats) as the judge. Generated schemas (tests/e2e/schema_generator.mjs,
// seeded) through response_format json_schema, streamed and not; json_object; vLLM's
// structured_outputs regex, choice, grammar and json; n > 1 and seeds; bad schemas and unsupported
// keywords answered 400 naming them. Run by CTest (label e2e) with KILN_BINARY and KILN_E2E_DIR set;
// KILN_STRUCTURED_SCHEMAS sets how many generated schemas run (100 by default).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { startServer, stopServer, post, openaiModule, E2E_DIR } from './server_helpers.mjs';
import { generateSchema } from './schema_generator.mjs';

const SCHEMAS = Number(process.env.KILN_STRUCTURED_SCHEMAS || 100);
const CONCURRENCY = 8;
const MAX_TOKENS = 256;
let server;
let client;
let model;
let ajv;

before(async () => {
  server = await startServer(['--max-num-seqs', '16']);
  const { default: OpenAI } = openaiModule();
  client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  model = (await client.models.list()).data[0].id;
  const require = createRequire(path.join(E2E_DIR, 'package.json'));
  const Ajv = require('ajv');
  const addFormats = require('ajv-formats');
  ajv = new (Ajv.default ?? Ajv)({ strict: false, allErrors: true });
  (addFormats.default ?? addFormats)(ajv);
});

after(async () => {
  assert.equal(await stopServer(server), 0);
});

const messages = (what) => [{ role: 'user', content: `Reply with ${what}.` }];

// The text of one chat answer, streamed or not, and its finish reason.
async function chat(params, stream) {
  if (!stream) {
    const r = await client.chat.completions.create({ model, ...params });
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  const s = await client.chat.completions.create({ model, ...params, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish };
}

// Runs `jobs` (async functions) CONCURRENCY at a time.
async function inBatches(jobs) {
  const results = [];
  for (let i = 0; i < jobs.length; i += CONCURRENCY) {
    results.push(...await Promise.all(jobs.slice(i, i + CONCURRENCY).map((j) => j())));
  }
  return results;
}

test(`generated schemas: every complete output parses and validates (${SCHEMAS} schemas, a quarter streamed)`, async (t) => {
  const jobs = [];
  for (let seed = 0; seed < SCHEMAS; ++seed) {
    const schema = generateSchema(seed);
    jobs.push(async () => {
      const out = await chat({
        messages: messages('a JSON value'), max_tokens: MAX_TOKENS, temperature: 1, seed,
        response_format: { type: 'json_schema', json_schema: { name: `s${seed}`, schema, strict: true } },
      }, seed % 4 === 0);
      return { seed, schema, ...out };
    });
  }
  const results = await inBatches(jobs);
  let complete = 0;
  for (const r of results) {
    assert.ok(r.finish === 'stop' || r.finish === 'length', `seed ${r.seed}: finish ${r.finish}`);
    if (r.finish !== 'stop') continue;
    ++complete;
    let value;
    assert.doesNotThrow(() => { value = JSON.parse(r.text); }, `seed ${r.seed}: not JSON: ${r.text}`);
    const validate = ajv.compile(r.schema);
    assert.ok(validate(value), `seed ${r.seed}: ${JSON.stringify(validate.errors)}\nschema ${JSON.stringify(r.schema)}\noutput ${r.text}`);
    // Properties come in the schema's order.
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      const order = Object.keys(r.schema.properties ?? {});
      const seen = Object.keys(value).filter((k) => order.includes(k)).map((k) => order.indexOf(k));
      assert.deepEqual(seen, [...seen].sort((a, b) => a - b), `seed ${r.seed}: property order ${r.text}`);
    }
  }
  t.diagnostic(`${complete} of ${SCHEMAS} outputs complete and valid; ${SCHEMAS - complete} cut by max_tokens`);
  // Outputs cut by max_tokens cannot be judged; they must stay the exception.
  assert.ok(complete >= 0.85 * SCHEMAS, `only ${complete} of ${SCHEMAS} outputs completed within ${MAX_TOKENS} tokens`);
});

test('streaming equals non-streaming and a seed repeats its output under a schema', async () => {
  const schema = generateSchema(1234);
  const params = {
    messages: messages('JSON'), max_tokens: MAX_TOKENS, temperature: 0.8, seed: 99,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
  };
  const a = await chat(params, false);
  const b = await chat(params, true);
  const c = await chat(params, false);
  assert.equal(a.text, b.text);
  assert.equal(a.text, c.text);
});

test('json_object: any JSON object, and n > 1 gives each choice its own valid output', async () => {
  const r = await post(server.base, '/v1/completions', {
    model, prompt: '{"name": "Anne", "age": 31}\n{"city": "Bath", "rooms": [1, 2]}\n', max_tokens: 300, n: 4, seed: 5,
    temperature: 0.7, response_format: { type: 'json_object' },
  });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(r.json.choices.length, 4);
  let complete = 0;
  for (const c of r.json.choices) {
    assert.ok(c.text.startsWith('{'), c.text);
    if (c.finish_reason !== 'stop') continue;
    ++complete;
    const v = JSON.parse(c.text);
    assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), c.text);
  }
  assert.ok(complete >= 2, `${complete} of 4 choices completed`);
  // Chat too, streamed: the text that arrives is the start of an object.
  const streamed = await chat({ messages: messages('a JSON object'), max_tokens: 32, seed: 1,
    response_format: { type: 'json_object' } }, true);
  assert.ok(streamed.text.startsWith('{'), streamed.text);
});

test('structured_outputs: regex, choice, grammar and json on /v1/completions', async () => {
  const completions = async (structured_outputs, extra = {}) => {
    const r = await post(server.base, '/v1/completions', {
      model, prompt: 'The answer:', max_tokens: 64, temperature: 1, seed: 3, n: 4, structured_outputs, ...extra,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json.choices.filter((c) => c.finish_reason === 'stop').map((c) => c.text);
  };
  const phones = await completions({ regex: '\\(\\d{3}\\) \\d{3}-\\d{4}' });
  assert.equal(phones.length, 4);
  for (const t of phones) assert.match(t, /^\(\d{3}\) \d{3}-\d{4}$/);
  const colours = await completions({ choice: ['red', 'green', 'dark blue'] });
  assert.equal(colours.length, 4);
  for (const t of colours) assert.ok(['red', 'green', 'dark blue'].includes(t), t);
  const grammar = 'root ::= "(" item ("," item){0,3} ")"\nitem ::= [a-z]{1,5} | [0-9]+';
  for (const t of await completions({ grammar })) assert.match(t, /^\(([a-z]{1,5}|[0-9]+)(,([a-z]{1,5}|[0-9]+)){0,3}\)$/);
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  for (const t of await completions({ json: JSON.stringify(schema) })) assert.equal(typeof JSON.parse(t).ok, 'boolean');
});

test('bad schemas and unsupported keywords are 400 naming them', async () => {
  const refused = async (body, param, pattern) => {
    await assert.rejects(client.chat.completions.create({ model, messages: messages('x'), max_tokens: 4, ...body }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(body));
      assert.equal(e.param, param, e.message);
      assert.match(e.message, pattern);
      return true;
    });
  };
  const withSchema = (schema) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
  await refused(withSchema({ type: 'object', properties: { n: { type: 'number', multipleOf: 5 } } }), 'response_format',
    /schema\.properties\.n\.multipleOf: the keyword 'multipleOf' is not supported/);
  await refused(withSchema({ oneOf: [{ type: 'string' }] }), 'response_format', /'oneOf' is not supported.*anyOf/);
  await refused(withSchema({ type: 'string', format: 'hostname' }), 'response_format', /format 'hostname'/);
  await refused(withSchema({ $ref: '#/$defs/nowhere' }), 'response_format', /points at nothing/);
  await refused(withSchema({ type: 'strin' }), 'response_format', /unknown type 'strin'/);
  await refused(withSchema({ type: 'string', pattern: '(a' }), 'response_format', /pattern: regex at offset/);
  await refused({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema',
    /required/);
  await refused({ response_format: { type: 'bogus' } }, 'response_format', /must be one of/);
  await refused({ structured_outputs: { grammar: 'root ::= "a" |\nitem ::= [a-' } }, 'structured_outputs', /line 2/);
  await refused({ structured_outputs: { regex: 'a', choice: ['b'] } }, 'structured_outputs', /exactly one/);
  await refused({ structured_outputs: { backend: 'xgrammar' } }, 'structured_outputs.backend', /backend/);
});
