// End-to-end tests of `kiln serve` on loopback: the official openai client and curl against the
// OpenAI routes, KServe routes, errors, limits, auth, cancellation, overload, SIGTERM and a real
// Prometheus scraping /metrics. Run by CTest (label e2e) with KILN_BINARY and KILN_E2E_DIR set.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import {
  startServer, stopServer, post, get, sseData, rawRequest, statusOf, metricValue, waitFor, curl, freePort,
  openaiModule,
} from './server_helpers.mjs';

const PROMPT = 'It is a truth universally';
let server;   // the main server: default limits
let client;   // openai client against it
let model;

before(async () => {
  server = await startServer(['--max-num-seqs', '16']);
  const { default: OpenAI } = openaiModule();
  client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await stopServer(server), 0, 'the server exits 0 on SIGTERM');
});

test('models list through the openai client and curl', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].object, 'model');
  assert.equal(list.data[0].owned_by, 'kiln');
  const viaCurl = JSON.parse(await curl([server.base + '/v1/models']));
  assert.equal(viaCurl.data[0].id, model);
  const one = await get(server.base, '/v1/models/' + model);
  assert.equal(one.status, 200);
  assert.equal(one.json.id, model);
});

test('completions: non-streamed and streamed text are equal, same seed gives the same text', async () => {
  const params = { model, prompt: PROMPT, max_tokens: 12, temperature: 0.8, seed: 11, ignore_eos: true };
  const whole = await client.completions.create(params);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 12);
  assert.ok(whole.usage.prompt_tokens > 0);
  const again = await client.completions.create(params);
  assert.equal(again.choices[0].text, whole.choices[0].text, 'same seed, same text');
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text, 'streamed text equals non-streamed');
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
});

test('chat: non-streamed and streamed are equal; greedy is deterministic', async () => {
  const params = { model, messages: [{ role: 'user', content: 'Who is there?' }], max_tokens: 10, temperature: 0 };
  const whole = await client.chat.completions.create(params);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let text = '', role = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      text += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.ok(chunks >= 2);
  assert.equal(text, whole.choices[0].message.content);
});

test('chat logprobs and n choices', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, temperature: 0, ignore_eos: true,
    logprobs: true, top_logprobs: 3, n: 2,
  });
  assert.equal(r.choices.length, 2);
  assert.equal(r.choices[0].message.content, r.choices[1].message.content, 'greedy choices agree');
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 4);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, 'greedy picks the most likely token');
  }
});

test('completions echo + logprobs scores the prompt as lm-evaluation-harness does', async () => {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 1, temperature: 0, echo: true, logprobs: 1 });
  const lp = r.choices[0].logprobs;
  const tok = await post(server.base, '/tokenize', { prompt: PROMPT });
  const n = tok.json.count;
  assert.equal(lp.tokens.length, n + 1);
  assert.equal(lp.token_logprobs[0], null, 'the first token has no logprob');
  for (let i = 1; i <= n; i++) assert.ok(lp.token_logprobs[i] < 0);
  assert.ok(r.choices[0].text.startsWith(PROMPT));
  const zero = await client.completions.create({ model, prompt: PROMPT, max_tokens: 0, echo: true, logprobs: 0 });
  assert.equal(zero.choices[0].text, PROMPT);
  assert.deepEqual(zero.choices[0].logprobs.token_logprobs.slice(1), lp.token_logprobs.slice(1, n));
});

test('16 concurrent greedy requests equal each request run alone', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Chapter ${i + 1}. It was`);
  const one = (p) => client.completions.create({ model, prompt: p, max_tokens: 8, temperature: 0, ignore_eos: true });
  const alone = [];
  for (const p of prompts.slice(0, 4)) alone.push((await one(p)).choices[0].text);
  const together = await Promise.all(prompts.map(one));
  for (let i = 0; i < 4; i++) assert.equal(together[i].choices[0].text, alone[i], `prompt ${i}`);
});

test('tokenize and detokenize round-trip', async () => {
  const t = await post(server.base, '/tokenize', { model, prompt: PROMPT });
  assert.equal(t.status, 200);
  assert.equal(t.json.tokens[0], 0);
  const d = await post(server.base, '/detokenize', { model, tokens: t.json.tokens.slice(1) });
  assert.equal(d.status, 200);
  assert.equal(d.json.prompt, PROMPT);
});

test('KServe v2: health, metadata, generate and generate_stream', async () => {
  assert.equal((await get(server.base, '/v2/health/live')).status, 200);
  assert.equal((await get(server.base, '/v2/health/ready')).status, 200);
  assert.equal((await get(server.base, `/v2/models/${model}/ready`)).status, 200);
  assert.equal((await get(server.base, '/v2')).json.name, 'kiln');
  const meta = await get(server.base, `/v2/models/${model}`);
  assert.equal(meta.json.name, model);
  assert.equal(meta.json.inputs[0].name, 'text_input');
  assert.equal((await get(server.base, '/v2/models/nope')).status, 404);
  const body = { text_input: PROMPT, parameters: { max_tokens: 8, temperature: 0, ignore_eos: true } };
  const g = await post(server.base, `/v2/models/${model}/generate`, body);
  assert.equal(g.status, 200);
  assert.equal(g.json.model_name, model);
  assert.equal(typeof g.json.text_output, 'string');
  const s = await post(server.base, `/v2/models/${model}/generate_stream`, body);
  assert.equal(s.status, 200);
  assert.match(s.headers.get('content-type'), /text\/event-stream/);
  const events = sseData(s.text).map((e) => JSON.parse(e));
  assert.equal(events.map((e) => e.text_output).join(''), g.json.text_output);
  assert.equal(events.at(-1).finish_reason, 'length');
});

test('curl: completion and an SSE stream ending in [DONE]', async () => {
  const body = JSON.stringify({ model, prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true });
  const whole = JSON.parse(await curl(['-H', 'Content-Type: application/json', '-d', body, server.base + '/v1/completions']));
  assert.equal(whole.choices[0].finish_reason, 'length');
  const streamBody = JSON.stringify({ model, prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
  const sse = await curl(['-N', '-H', 'Content-Type: application/json', '-d', streamBody, server.base + '/v1/completions']);
  const data = sseData(sse);
  assert.equal(data.at(-1), '[DONE]');
  const text = data.slice(0, -1).map((d) => JSON.parse(d).choices[0].text).join('');
  assert.equal(text, whole.choices[0].text);
});

test('X-Request-Id is echoed, or generated', async () => {
  const mine = await get(server.base, '/v1/models', { 'x-request-id': 'e2e-req-1' });
  assert.equal(mine.headers.get('x-request-id'), 'e2e-req-1');
  const fresh = await get(server.base, '/v1/models');
  assert.match(fresh.headers.get('x-request-id'), /^[0-9a-f]{32}$/);
  await waitFor(() => server.stderrText().includes('"request_id":"e2e-req-1"'), { timeoutMs: 5000 });
  assert.ok(server.stderrText().includes('"request_id":"e2e-req-1"'), 'the access log names the request');
  assert.ok(!server.stderrText().includes(PROMPT), 'no prompt text in the log without --log-prompts');
});

test('errors through the openai client carry the status and OpenAI error object', async () => {
  const { BadRequestError } = openaiModule();
  await assert.rejects(client.completions.create({ model, prompt: PROMPT, temperature: 5 }), (e) => {
    assert.ok(e instanceof BadRequestError);
    assert.equal(e.status, 400);
    assert.equal(e.param, 'temperature');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model, messages: [] }), (e) => e.status === 400);
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }), (e) => e.status === 404 && e.code === 'model_not_found');
});

// Each malformed request gets its status and the server keeps serving.
test('a table of malformed requests', async () => {
  const big = 'x'.repeat(5 << 20);
  const cases = [
    ['POST', '/v1/completions', '{', 400],
    ['POST', '/v1/completions', '[]', 400],
    ['POST', '/v1/completions', '"prompt"', 400],
    ['POST', '/v1/completions', '', 400],
    ['POST', '/v1/completions', '{}', 400],
    ['POST', '/v1/completions', { prompt: 3 }, 400],
    ['POST', '/v1/completions', { prompt: [] }, 400],
    ['POST', '/v1/completions', { prompt: [1, 99999] }, 400],
    ['POST', '/v1/completions', { prompt: 'x', model: 'gpt-4' }, 404],
    ['POST', '/v1/completions', { prompt: 'x', max_tokens: -5 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', max_tokens: 100000 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', max_tokens: 'ten' }, 400],
    ['POST', '/v1/completions', { prompt: 'x', temperature: -1 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', top_p: 0 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', top_k: -7 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', n: 0 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', n: 1000 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', logprobs: 99 }, 400],
    ['POST', '/v1/completions', { prompt: 'x', stop: [''] }, 400],
    ['POST', '/v1/completions', { prompt: 'x', logit_bias: { a: 1 } }, 400],
    ['POST', '/v1/completions', { prompt: 'x', seed: 'abc' }, 400],
    ['POST', '/v1/completions', { prompt: 'x', stream: 'yes' }, 400],
    ['POST', '/v1/completions', { prompt: Array(600).fill(5) }, 400],
    ['POST', '/v1/completions', Buffer.from('{"prompt": "\xff\xfe"}', 'latin1'), 400],
    ['POST', '/v1/chat/completions', { messages: [] }, 400],
    ['POST', '/v1/chat/completions', { messages: 'hi' }, 400],
    ['POST', '/v1/chat/completions', { messages: [{ role: 'user' }] }, 400],
    ['POST', '/v1/chat/completions', { messages: [{ role: 'alien', content: 'x' }] }, 400],
    ['POST', '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url' }] }] }, 400],
    ['POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }, 400],
    ['POST', '/tokenize', {}, 400],
    ['POST', '/detokenize', { tokens: [-1] }, 400],
    ['POST', `/v2/models/${model}/generate`, { parameters: {} }, 400],
    ['POST', '/v2/models/nope/generate', { text_input: 'x' }, 404],
    ['GET', '/v1/nothing', null, 404],
    ['GET', '/v1/models/other', null, 404],
    ['GET', '/v1/completions', null, 405],
    ['DELETE', '/v1/models', null, 405],
    ['PUT', '/v1/chat/completions', '{}', 405],
    ['POST', '/v1/completions', big, 413],
  ];
  assert.ok(cases.length >= 30);
  for (const [method, p, body, want] of cases) {
    const init = { method, headers: { 'content-type': 'application/json' } };
    if (body !== null) init.body = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
    let status;
    try {
      const res = await fetch(server.base + p, init);
      status = res.status;
      const text = await res.text();
      if (status !== 413 && !p.startsWith('/v2')) {
        const j = JSON.parse(text);
        assert.equal(typeof j.error.message, 'string', `${method} ${p}: an OpenAI error object`);
      }
      if (status === 405) assert.ok(res.headers.get('allow'));
    } catch (e) {
      status = `error ${e.message}`;
    }
    assert.equal(status, want, `${method} ${p} ${typeof body === 'string' ? body.slice(0, 40) : JSON.stringify(body)?.slice(0, 60)}`);
  }
  // Headers too large: 431, on a raw connection.
  const raw = await rawRequest(server.port, [`GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'y'.repeat(64 << 10)}\r\n\r\n`]);
  assert.equal(statusOf(raw), 431);
  // Not HTTP at all: 400.
  assert.equal(statusOf(await rawRequest(server.port, ['HELLO THERE\r\n\r\n'])), 400);
  // Still serving.
  const ok = await client.completions.create({ model, prompt: PROMPT, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
  const metrics = (await get(server.base, '/metrics')).text;
  assert.ok(metricValue(metrics, 'kiln_http_requests_total', { endpoint: 'completions', status: '400' }) >= 20);
  assert.ok(metricValue(metrics, 'kiln_http_requests_total', { endpoint: 'other', status: '404' }) >= 1);
});

test('every request is answered exactly once, streamed or not, many at a time', async () => {
  // The engine may notify a connection again after its request's last event; a second answer
  // written on top of the first would corrupt the connection (or the server's memory).
  const one = async (i) => {
    // Alternately streamed; one, two or three sequences (n, a list of prompts), each its own
    // stream of engine events.
    const stream = i % 2 === 1;
    const shape = Math.floor(i / 2) % 3;
    const prompt = shape === 2 ? [PROMPT, 'The sea'] : PROMPT;
    const n = shape === 1 ? 3 : 1;
    const body = JSON.stringify({ model, prompt, n, max_tokens: 1 + (i % 5), stream });
    const raw = await rawRequest(server.port, [
      `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    ], { waitMs: 60000 });
    assert.equal((raw.match(/HTTP\/1\.1 /g) || []).length, 1, `request ${i}: one response, got ${JSON.stringify(raw.slice(0, 1500))}`);
    assert.equal(statusOf(raw), 200, `request ${i}`);
    const payload = raw.slice(raw.indexOf('\r\n\r\n') + 4);
    if (stream) {
      assert.equal((payload.match(/data: \[DONE\]/g) || []).length, 1, `request ${i}: one [DONE]`);
      assert.ok(payload.endsWith('0\r\n\r\n'), `request ${i}: the chunked body ends once`);
    } else {
      assert.equal(JSON.parse(payload).choices.length, shape === 0 ? 1 : shape === 1 ? 3 : 2, `request ${i}: one completion object`);
    }
  };
  for (let round = 0; round < 24; ++round) await Promise.all(Array.from({ length: 16 }, (_, k) => one(round * 16 + k)));
  assert.equal((await get(server.base, '/v2/health/live')).status, 200);
});

test('cancelling a stream mid-way frees its KV blocks', async () => {
  const controller = new AbortController();
  const res = await fetch(server.base + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: 400, ignore_eos: true, stream: true }),
  });
  const reader = res.body.getReader();
  let seen = '';
  while ((seen.match(/data: /g) || []).length < 3) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += Buffer.from(value).toString();
  }
  const during = (await get(server.base, '/metrics')).text;
  assert.ok(metricValue(during, 'kiln_kv_cache_blocks_used', { model }) > 0, 'the stream holds blocks');
  controller.abort();
  const freed = await waitFor(async () => {
    const m = (await get(server.base, '/metrics')).text;
    return metricValue(m, 'kiln_kv_cache_blocks_used', { model }) === 0 && metricValue(m, 'kiln_requests_running', { model }) === 0;
  }, { timeoutMs: 60000 });
  assert.ok(freed, 'blocks are freed after the client goes away');
});

test('clients that go away at any moment leave the server serving and every KV block free', async () => {
  // Raw connections that close mid-request, right after sending, after a few bytes of the
  // answer, or half-close and wait; streamed and not, one or several sequences, pipelined
  // pairs. A fixed seed makes each run the same schedule.
  let seed = 12345;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const request = (body, extra = '') => `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const one = (i) => new Promise((resolve) => {
    const body = JSON.stringify({ model, prompt: rand(2) ? PROMPT : [PROMPT, 'The sea'], n: 1 + rand(2),
      max_tokens: 4 + rand(60), ignore_eos: true, stream: rand(2) === 1 });
    const mode = rand(5);
    const sock = net.connect(server.port, '127.0.0.1');
    let got = 0;
    const finish = () => { sock.destroy(); resolve(); };
    sock.on('error', () => {});
    sock.on('close', resolve);
    sock.on('data', (d) => {
      got += d.length;
      if (mode === 2 && got >= 1 + (i % 7) * 40) finish();  // leaves after a few bytes
    });
    sock.on('connect', () => {
      if (mode === 0) {  // half a request, then gone
        const text = request(body);
        sock.write(text.slice(0, 1 + rand(text.length - 1)));
        setTimeout(finish, rand(20));
      } else if (mode === 1) {  // the whole request, gone at once or a moment later
        sock.write(request(body));
        setTimeout(finish, rand(30));
      } else if (mode === 3) {  // done writing, still reading: the answer still comes
        sock.end(request(body, 'Connection: close\r\n'));
        setTimeout(finish, 5000);
      } else {  // two pipelined requests, gone during the first or second
        sock.write(request(body) + request(body, 'Connection: close\r\n'));
        if (mode === 4) setTimeout(finish, rand(200));
        else setTimeout(finish, 5000);
      }
    });
  });
  for (let round = 0; round < 6; ++round) await Promise.all(Array.from({ length: 16 }, (_, k) => one(round * 16 + k)));
  const idle = await waitFor(async () => {
    const m = (await get(server.base, '/metrics')).text;
    return metricValue(m, 'kiln_kv_cache_blocks_used', { model }) === 0 && metricValue(m, 'kiln_requests_running', { model }) === 0;
  }, { timeoutMs: 60000 });
  assert.ok(idle, 'every request ended and freed its blocks');
  assert.equal((await get(server.base, '/v2/health/live')).status, 200);
  const ok = await client.completions.create({ model, prompt: PROMPT, max_tokens: 3 });
  assert.equal(ok.choices.length, 1);
});

test('API keys: 401 without or with a wrong key, health stays open; slow clients get 408; --stream-interval', async () => {
  const keyFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-')), 'key');
  fs.writeFileSync(keyFile, 'sekret-123\n');
  const s = await startServer(['--api-key-file', keyFile, '--request-timeout', '2', '--stream-interval', '3']);
  try {
    const body = { prompt: PROMPT, max_tokens: 2 };
    const none = await post(s.base, '/v1/completions', body);
    assert.equal(none.status, 401);
    assert.equal(none.json.error.code, 'invalid_api_key');
    assert.equal((await post(s.base, '/v1/completions', body, { authorization: 'Bearer wrong' })).status, 401);
    assert.equal((await get(s.base, '/v1/models')).status, 401);
    assert.equal((await get(s.base, '/metrics')).status, 401);
    assert.equal((await get(s.base, '/v2/health/live')).status, 200);
    assert.equal((await get(s.base, '/v2/health/ready')).status, 200);
    assert.equal((await post(s.base, '/v1/completions', body, { authorization: 'Bearer sekret-123' })).status, 200);
    const { default: OpenAI } = openaiModule();
    const authed = new OpenAI({ baseURL: s.base + '/v1', apiKey: 'sekret-123', maxRetries: 0 });
    const models = (await authed.models.list()).data;
    assert.equal(models.length, 1);
    // Tokens written three at a time: the same text and chunks as written one by one.
    const params = { model: models[0].id, prompt: PROMPT, max_tokens: 11, temperature: 0, ignore_eos: true };
    const whole = await authed.completions.create(params);
    let text = '', chunks = 0, finish = null;
    for await (const chunk of await authed.completions.create({ ...params, stream: true })) {
      for (const c of chunk.choices) {
        text += c.text;
        chunks += 1;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, whole.choices[0].text, 'streamed in groups of three equals non-streamed');
    assert.equal(finish, 'length');
    assert.ok(chunks >= 11, `a chunk per token still (${chunks})`);
    // Half a request, then silence: 408 within the request timeout (2 s here), then close.
    const raw = await rawRequest(s.port, ['POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"pro'], { waitMs: 30000 });
    assert.equal(statusOf(raw), 408);
  } finally {
    assert.equal(await stopServer(s), 0);
  }
});

test('overload: a full queue answers 429 with Retry-After and the server stays healthy', async () => {
  const s = await startServer(['--max-num-seqs', '1', '--max-queue', '1']);
  try {
    const body = { prompt: PROMPT, max_tokens: 64, ignore_eos: true };
    const results = await Promise.all(Array.from({ length: 8 }, () => post(s.base, '/v1/completions', body)));
    const statuses = results.map((r) => r.status);
    assert.ok(statuses.includes(429), `some requests are refused: ${statuses}`);
    assert.ok(statuses.includes(200), `some requests are served: ${statuses}`);
    for (const r of results.filter((x) => x.status === 429)) {
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
      assert.equal(r.json.error.code, 'server_busy');
    }
    assert.equal((await get(s.base, '/v2/health/ready')).status, 200);
    assert.equal((await post(s.base, '/v1/completions', { prompt: PROMPT, max_tokens: 2 })).status, 200);
  } finally {
    assert.equal(await stopServer(s), 0);
  }
});

test('SIGTERM: running requests finish, then the server exits 0', async () => {
  const s = await startServer(['--shutdown-grace', '60']);
  const res = await fetch(s.base + '/v1/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: 48, ignore_eos: true, stream: true }),
  });
  const reader = res.body.getReader();
  let text = '';
  const first = await reader.read();
  text += Buffer.from(first.value).toString();
  const exited = new Promise((resolve) => s.on('exit', (code) => resolve(code)));
  s.kill('SIGTERM');
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
  }
  const data = sseData(text);
  assert.equal(data.at(-1), '[DONE]', 'the running stream completes');
  const finish = JSON.parse(data.at(-2)).choices[0].finish_reason;
  assert.equal(finish, 'length');
  assert.equal(await exited, 0);
  await assert.rejects(fetch(s.base + '/v2/health/live'), 'no longer accepting');
});

test('Prometheus scrapes /metrics and answers a PromQL query', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-prom-'));
  const promPort = await freePort();
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), [
    'global:', '  scrape_interval: 1s', 'scrape_configs:', '  - job_name: kiln',
    '    static_configs:', `      - targets: ['127.0.0.1:${server.port}']`, '',
  ].join('\n'));
  const prom = spawn('prometheus', [
    `--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${promPort}`, '--log.level=warn',
  ], { stdio: 'ignore' });
  try {
    await client.completions.create({ model, prompt: PROMPT, max_tokens: 4 });
    const query = async (q) => {
      try {
        const r = await get(`http://127.0.0.1:${promPort}`, '/api/v1/query?query=' + encodeURIComponent(q));
        return r.json?.status === 'success' ? r.json.data.result : null;
      } catch { return null; }
    };
    const up = await waitFor(async () => {
      const r = await query('up{job="kiln"}');
      return r && r.length === 1 && r[0].value[1] === '1' ? r : null;
    }, { timeoutMs: 120000, stepMs: 500 });
    assert.ok(up, 'prometheus scraped the server');
    const served = await waitFor(async () => {
      const r = await query('sum(kiln_http_requests_total{endpoint="completions",status="200"})');
      return r && r.length === 1 && Number(r[0].value[1]) >= 1 ? r : null;
    }, { timeoutMs: 60000, stepMs: 500 });
    assert.ok(served, 'PromQL sees the served completions');
    const hist = await query('histogram_quantile(0.5, sum(rate(kiln_e2e_request_latency_seconds_bucket[1m])) by (le))');
    assert.ok(hist !== null, 'a histogram query parses');
  } finally {
    prom.kill('SIGTERM');
  }
});
