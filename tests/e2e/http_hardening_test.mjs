// End-to-end tests of `kiln serve`'s front end against hostile and careless input, one test per
// finding of a hostile-input run: request smuggling through Transfer-Encoding, browser attacks on
// an open local server (simple POSTs, DNS rebinding, cross-origin pages), fields that must not be
// ignored, the queue limit under a burst, KServe versions, error texts, unknown models,
// min_tokens, and what a client that goes away counts as. Raw sockets, fetch, curl and the openai
// client on loopback. Run by CTest (label e2e) with KILN_BINARY and KILN_E2E_DIR set.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startServer, stopServer, post, get, rawRequest, statusOf, metricValue, waitFor, curl, openaiModule,
} from './server_helpers.mjs';

const PROMPT = 'It is a truth universally';
let server;
let client;
let model;

before(async () => {
  server = await startServer(['--max-num-seqs', '16', '--allowed-origins', 'https://app.example']);
  const { default: OpenAI } = openaiModule();
  client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(server), 0);
});

// Every response in a raw answer (status lines), in order.
function statuses(raw) {
  return [...raw.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
}

test('request smuggling: Transfer-Encoding with Content-Length, unknown and non-final codings are refused', async () => {
  const hidden = 'GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';
  // A body framed by Content-Length for one reader and by chunks (or nothing) for another: the
  // request hidden in it must never run.
  for (const te of ['xchunked', 'identity', 'chunked, identity', 'chunked', 'gzip, chunked']) {
    const body = `0\r\n\r\n${hidden}`;
    const raw = await rawRequest(server.port, [
      `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: ${te}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    ]);
    assert.deepEqual(statuses(raw), [400], `TE '${te}' with Content-Length: one 400 and nothing else (${raw.slice(0, 200)})`);
    // With chunked last, the HTTP parser itself refuses the length; otherwise the framing check.
    assert.match(raw, /both Transfer-Encoding and Content-Length|bad Content-Length/);
  }
  // Without a length: a coding the server does not know is 501, and it names it.
  for (const [te, want] of [['gzip, chunked', 501], ['xchunked', 501], ['chunked, identity', 501], ['chunked, chunked', 400]]) {
    const raw = await rawRequest(server.port, [
      `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
      `Transfer-Encoding: ${te}\r\n\r\n5\r\n{"a":\r\n0\r\n\r\n${hidden}`,
    ]);
    assert.deepEqual(statuses(raw), [want], `TE '${te}': ${raw.slice(0, 200)}`);
  }
  assert.match(await rawRequest(server.port, [
    'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n',
  ]), /'gzip' is not supported/);
  // Plain chunked bodies still work.
  const body = JSON.stringify({ model, prompt: PROMPT, max_tokens: 2 });
  const raw = await rawRequest(server.port, [
    'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n' +
    `Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
  ]);
  assert.deepEqual(statuses(raw), [200]);
  assert.equal((await get(server.base, '/v2/health/ready')).status, 200, 'the server is unharmed');
});

test('browser attacks: simple POSTs get 415, foreign Host names 403, HTTP/1.1 without Host 400', async () => {
  const body = JSON.stringify({ model, prompt: PROMPT, max_tokens: 2 });
  // What a web page may send without a CORS preflight.
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    const r = await post(server.base, '/v1/completions', body, { 'content-type': type });
    assert.equal(r.status, 415, type);
    assert.equal(r.json.error.code, 'unsupported_media_type');
  }
  const none = await fetch(server.base + '/v1/completions', { method: 'POST', body: new Blob([body]) });
  assert.equal(none.status, 415, 'no Content-Type at all');
  // curl -d without -H sends a form type; the message says what to add.
  const viaCurl = JSON.parse(await curl(['-d', body, server.base + '/v1/completions']));
  assert.match(viaCurl.error.message, /Content-Type: application\/json/);
  assert.equal((await post(server.base, '/v1/completions', body, { 'content-type': 'application/json; charset=utf-8' })).status, 200);
  // DNS rebinding: a page on a name its owner points at 127.0.0.1 reaches the server with that name.
  for (const p of ['/v1/models', '/metrics', '/health']) {
    const raw = await rawRequest(server.port, [`GET ${p} HTTP/1.1\r\nHost: rebind.example:${server.port}\r\nConnection: close\r\n\r\n`]);
    assert.equal(statusOf(raw), 403, p);
    assert.match(raw, /--allowed-hosts rebind\.example/);
  }
  for (const host of ['localhost', `127.0.0.1:${server.port}`, `[::1]:${server.port}`]) {
    assert.equal(statusOf(await rawRequest(server.port, [`GET /v1/models HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`])), 200, host);
  }
  assert.equal(statusOf(await rawRequest(server.port, ['GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n'])), 400);
  assert.equal(statusOf(await rawRequest(server.port, ['GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n'])), 400);
  assert.match(await rawRequest(server.port, ['GET /v1/models HTTP/1.0\r\n\r\n']), /^HTTP\/1\.0 200/, 'HTTP/1.0 needs no Host');
});

test('CORS: off for other sites, on for --allowed-origins, preflights answered', async () => {
  const body = JSON.stringify({ model, prompt: PROMPT, max_tokens: 2 });
  const evil = await post(server.base, '/v1/completions', body, { origin: 'https://evil.example' });
  assert.equal(evil.status, 403);
  assert.equal(evil.headers.get('access-control-allow-origin'), null);
  const own = await post(server.base, '/v1/completions', body, { origin: server.base });
  assert.equal(own.status, 200, 'the server\'s own pages are same-origin');
  const app = await post(server.base, '/v1/completions', body, { origin: 'https://app.example' });
  assert.equal(app.status, 200);
  assert.equal(app.headers.get('access-control-allow-origin'), 'https://app.example');
  const preflight = (origin) => fetch(server.base + '/v1/chat/completions', {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, authorization' },
  });
  const ok = await preflight('https://app.example');
  assert.equal(ok.status, 204);
  assert.equal(ok.headers.get('access-control-allow-origin'), 'https://app.example');
  assert.match(ok.headers.get('access-control-allow-headers'), /Content-Type/);
  assert.equal((await preflight('https://evil.example')).status, 403);
  // Streams carry the header too.
  const res = await fetch(server.base + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json', origin: 'https://app.example' },
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: 2, stream: true }),
  });
  assert.equal(res.headers.get('access-control-allow-origin'), 'https://app.example');
  await res.text();
});

test('fields that are not supported are 400 naming them, never ignored', async () => {
  const messages = [{ role: 'user', content: 'Say hi.' }];
  const refused = async (params, param) => {
    await assert.rejects(client.chat.completions.create({ model, messages, max_tokens: 4, ...params }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(params));
      assert.equal(e.param, param, e.message);
      return true;
    });
  };
  // JSON formats are structured outputs now (structured_outputs_test.mjs); what they leave out is still refused.
  await refused({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } } },
    'response_format');
  await refused({ response_format: { type: 'json_object', schema: {} } }, 'response_format.schema');
  await refused({ response_format: { type: 'bogus' } }, 'response_format');
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
  await assert.rejects(
    client.chat.completions.create({ model, messages, tools, tool_choice: { type: 'function', function: { name: 'send_mail' } } }),
    (e) => e.status === 400 && e.param === 'tool_choice' && /'send_mail', which is not in tools/.test(e.message));
  await refused({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } }], tool_choice: 'required' },
    'tools');
  await refused({ store: true }, 'store');
  await refused({ guided_json: { type: 'object' } }, 'guided_json');
  await refused({ structured_outputs: { json_object: true } }, 'structured_outputs.json_object');
  const unknown = await post(server.base, '/v1/completions', { model, prompt: PROMPT, frobnicate: 1 });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.json.error.param, 'frobnicate');
  // What is supported still works: a text format, tool_choice auto and none, the user.
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 4, response_format: { type: 'text' }, tools, tool_choice: 'none', user: 'user-7',
  });
  assert.equal(r.choices.length, 1);
});

test('--max-queue counts requests beyond the sequence slots: a burst into free slots is not refused', async () => {
  const s = await startServer(['--max-num-seqs', '64', '--max-queue', '2']);
  try {
    const body = { prompt: PROMPT, max_tokens: 4 };
    const results = await Promise.all(Array.from({ length: 40 }, () => post(s.base, '/v1/completions', body)));
    const counts = {};
    for (const r of results) counts[r.status] = (counts[r.status] || 0) + 1;
    assert.deepEqual(counts, { 200: 40 }, `a burst of 40 into 64 free slots: ${JSON.stringify(counts)}`);
  } finally {
    assert.equal(await stopServer(s), 0);
  }
  // Full slots and a full queue: 429, its message said once.
  const t = await startServer(['--max-num-seqs', '1', '--max-queue', '1']);
  try {
    const body = { prompt: PROMPT, max_tokens: 48, ignore_eos: true };
    const results = await Promise.all(Array.from({ length: 6 }, () => post(t.base, '/v1/completions', body)));
    const busy = results.filter((r) => r.status === 429);
    assert.ok(busy.length >= 1, results.map((r) => r.status).join());
    for (const r of busy) {
      assert.equal((r.json.error.message.match(/later/g) || []).length, 1, r.json.error.message);
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
    }
  } finally {
    assert.equal(await stopServer(t), 0);
  }
});

test('KServe paths take the model\'s one version only', async () => {
  const body = { text_input: PROMPT, parameters: { max_tokens: 2 } };
  assert.equal((await post(server.base, `/v2/models/${model}/versions/1/generate`, body)).status, 200);
  const seven = await post(server.base, `/v2/models/${model}/versions/7/generate`, body);
  assert.equal(seven.status, 404);
  assert.match(seven.json.error, /no version '7'/);
  assert.equal((await post(server.base, `/v2/models/${model}/versions/7/generate_stream`, body)).status, 404);
  assert.equal((await get(server.base, `/v2/models/${model}/versions/7`)).status, 404);
  assert.equal((await get(server.base, `/v2/models/${model}/versions/7/ready`)).status, 404);
  assert.equal((await get(server.base, `/v2/models/${model}/versions/1/ready`)).status, 200);
});

test('errors speak for themselves: JSON parse errors, unknown models, min_tokens', async () => {
  for (const body of ['{', '{"prompt": tru}', '{"prompt": "x",}', '{"max_tokens": 7e777}']) {
    const r = await post(server.base, '/v1/completions', body);
    assert.equal(r.status, 400, body);
    assert.doesNotMatch(r.json.error.message, /json\.exception|\[json/, r.json.error.message);
    assert.match(r.json.error.message, /not valid JSON/);
  }
  // A body nested far deeper than any request needs (here a schema) is refused before anything
  // recursive reads it, and the server stays up.
  const deepSchema = '{"type":"array","items":'.repeat(100000) + '{"type":"integer"}' + '}'.repeat(100000);
  const deep = await post(server.base, '/v1/completions',
    `{"model":"${model}","prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"d","schema":${deepSchema}}}}`);
  assert.equal(deep.status, 400);
  assert.match(deep.json.error.message, /nests arrays and objects \d+ deep/);
  assert.equal((await get(server.base, '/health')).status, 200);
  // OpenAI and vLLM answer an unknown model with 404.
  for (const p of ['/v1/completions', '/v1/chat/completions']) {
    const r = await post(server.base, p, { model: 'no-such-model', prompt: PROMPT, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(r.status, 404, p);
    assert.equal(r.json.error.code, 'model_not_found');
  }
  const bad = await post(server.base, '/v1/completions', { model, prompt: PROMPT, max_tokens: 4, min_tokens: 9 });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /min_tokens/);
  // min_tokens holds EOS and stop tokens back: exactly that many tokens come.
  for (const n of [12, 24]) {
    const r = await post(server.base, '/v1/completions', { model, prompt: 'The end.', max_tokens: n, min_tokens: n, temperature: 0 });
    assert.equal(r.status, 200);
    assert.equal(r.json.usage.completion_tokens, n);
  }
});

test('a client that goes away is counted as cancelled, not failed', async () => {
  const metrics = async () => (await get(server.base, '/metrics')).text;
  const before = await metrics();
  const failed0 = metricValue(before, 'kiln_requests_failed_total', { model }) ?? 0;
  const cancelled0 = metricValue(before, 'kiln_requests_cancelled_total', { model }) ?? 0;
  const controller = new AbortController();
  const res = await fetch(server.base + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: 400, ignore_eos: true, stream: true }),
  });
  const reader = res.body.getReader();
  await reader.read();
  controller.abort();
  const counted = await waitFor(async () => (metricValue(await metrics(), 'kiln_requests_cancelled_total', { model }) ?? 0) > cancelled0,
    { timeoutMs: 30000 });
  assert.ok(counted, 'kiln_requests_cancelled_total went up');
  assert.equal(metricValue(await metrics(), 'kiln_requests_failed_total', { model }) ?? 0, failed0, 'no failure counted');
});
