// End-to-end test of the playground that `kiln serve` serves at /: its static files over HTTP,
// then Debian's chromium, headless and driven by puppeteer-core, chatting through the page and
// watching its dashboard under a burst of requests. Run by CTest (label e2e) with KILN_BINARY and
// KILN_E2E_DIR set; screenshots go to KILN_E2E_SCREENSHOTS (default: KILN_E2E_DIR/screenshots).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { startServer, stopServer, post, get, E2E_DIR } from './server_helpers.mjs';

const CHROMIUM = process.env.KILN_CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.KILN_E2E_SCREENSHOTS ||
  (E2E_DIR ? path.join(E2E_DIR, 'screenshots') : fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-playground-')));
const WAIT = { timeout: 60000 };  // every wait in the browser is bounded
const QUESTION = 'Where did you see him last?';

let server, browser, page;
const chatRequests = [];  // [{headers, body}] of every chat request the page sent

// puppeteer-core from the clients tests/e2e/setup.sh installs into KILN_E2E_DIR (an ES module).
async function puppeteerModule() {
  if (!E2E_DIR) throw new Error('KILN_E2E_DIR is not set; run tests/e2e/setup.sh DIR first');
  const require = createRequire(path.join(E2E_DIR, 'package.json'));
  return (await import(pathToFileURL(require.resolve('puppeteer-core')).href)).default;
}

async function openPage(base) {
  const p = await browser.newPage();
  await p.setViewport({ width: 1280, height: 800 });
  p.setDefaultTimeout(WAIT.timeout);
  const problems = [];
  p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  p.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  p.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions') && r.method() === 'POST') {
      chatRequests.push({ headers: r.headers(), body: JSON.parse(r.postData()) });
    }
  });
  p.problems = problems;
  const response = await p.goto(base + '/', { waitUntil: 'load', ...WAIT });
  assert.equal(response.status(), 200);
  await p.waitForFunction(() => document.getElementById('model').options.length > 0 ||
                                document.getElementById('server-status').dataset.state === 'unauthorized', WAIT);
  return p;
}

async function setField(id, value) {
  await page.$eval(`#${id}`, (el, v) => { el.value = v; el.dispatchEvent(new Event('change')); }, String(value));
}

// Sends `text` through the composer and waits for the answer to finish; returns what the page
// shows and what the test saw of it while it streamed.
async function send(text) {
  const before = chatRequests.length;
  await page.evaluate(() => {
    // Record every state of the newest answer's text as the page writes it.
    window.observed = [];
    window.observer?.disconnect();
    window.observer = new MutationObserver((records) => {
      const at = performance.now();
      for (const r of records) {
        if (!r.target.classList?.contains('content') || !r.target.closest('.msg.assistant')) continue;
        for (const n of r.addedNodes) if (n.nodeType === Node.TEXT_NODE) window.observed.push({ at, length: n.data.length });
      }
    });
    window.observer.observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
  });
  await page.$eval('#prompt', (el, v) => { el.value = v; }, text);
  await page.click('#send');
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll('.msg.assistant')].pop();
    return last && last.dataset.state !== 'streaming';
  }, WAIT);
  const shown = await page.evaluate(() => {
    const last = [...document.querySelectorAll('.msg.assistant')].pop();
    return {
      state: last.dataset.state, text: last.querySelector('.content').textContent,
      error: last.querySelector('.error-text')?.textContent ?? null, finish: last.dataset.finishReason ?? null,
      completionTokens: last.dataset.completionTokens ? Number(last.dataset.completionTokens) : null,
      chunks: Number(last.dataset.chunks), observed: window.observed,
    };
  });
  shown.request = chatRequests.length > before ? chatRequests[chatRequests.length - 1] : null;
  return shown;
}

// The same request made by the test, answered whole.
async function answerWhole(body) {
  const r = await post(server.base, '/v1/chat/completions', { ...body, stream: false, stream_options: undefined });
  assert.equal(r.status, 200, r.text);
  return r.json.choices[0];
}

before(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  console.log(`screenshots: ${SHOTS}`);
  server = await startServer(['--max-num-seqs', '16']);
  const puppeteer = await puppeteerModule();
  browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true, timeout: 60000, protocolTimeout: 120000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check'],
  });
  page = await openPage(server.base);
});

after(async () => {
  await browser?.close();
  assert.equal(await stopServer(server), 0, 'the server exits 0 on SIGTERM');
});

test('static files: types, caching, ETag, HEAD, 404 and 405', async () => {
  const index = await get(server.base, '/');
  assert.equal(index.status, 200);
  assert.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
  assert.equal(index.headers.get('cache-control'), 'no-cache');
  assert.match(index.text, /<title>Kiln playground<\/title>/);
  const etag = index.headers.get('etag');
  assert.match(etag, /^"[0-9a-f]+"$/);
  assert.equal((await get(server.base, '/', { 'if-none-match': etag })).status, 304);
  const head = await fetch(server.base + '/', { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(Number(head.headers.get('content-length')), Buffer.byteLength(index.text));
  assert.equal((await head.text()).length, 0);
  // Every file the page loads, with the type a browser needs for it.
  const types = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8', svg: 'image/svg+xml' };
  const assets = [...index.text.matchAll(/(?:src|href)="(\/ui\/[^"]+)"/g)].map((m) => m[1]);
  assert.ok(assets.length >= 3, `the page names its files: ${assets}`);
  for (const a of new Set(assets)) {
    const r = await get(server.base, a);
    assert.equal(r.status, 200, a);
    assert.equal(r.headers.get('content-type'), types[a.split('.').pop()], a);
    assert.ok(r.headers.get('etag'), a);
  }
  for (const js of ['chat.js', 'dashboard.js', 'sse.js', 'prometheus.js', 'line_chart.js', 'api.js']) {
    assert.equal((await get(server.base, '/ui/' + js)).status, 200, js);
  }
  const missing = await get(server.base, '/ui/missing.js');
  assert.equal(missing.status, 404);
  assert.equal(missing.json.error.code, 'not_found');
  assert.equal((await get(server.base, '/index.html')).status, 404);
  const postRoot = await post(server.base, '/', {});
  assert.equal(postRoot.status, 405);
  assert.equal(postRoot.headers.get('allow'), 'GET');
  // The page fetches nothing from elsewhere.
  assert.doesNotMatch(index.text, /(?:src|href)="(?:https?:)?\/\//);
});

test('chat: the streamed answer grows, finishes, and equals the whole answer; settings reach the server', async () => {
  await setField('system', 'You answer in the voice of a butler.');
  await setField('temperature', '0');
  await setField('max_tokens', '64');
  const shown = await send(QUESTION);
  assert.equal(shown.state, 'done', shown.error ?? '');
  assert.ok(shown.text.length > 0, 'a non-empty answer');
  // It grew on the page, piece by piece, over more than one delivery.
  const lengths = shown.observed.map((o) => o.length);
  assert.ok(lengths.length >= 3, `the answer was written in pieces: ${lengths}`);
  for (let i = 1; i < lengths.length; i++) assert.ok(lengths[i] > lengths[i - 1], `growing: ${lengths}`);
  assert.equal(lengths[lengths.length - 1], shown.text.length);
  assert.ok(new Set(shown.observed.map((o) => o.at)).size >= 2, 'pieces arrived at different times');
  assert.equal(shown.chunks, lengths.length);
  // What the page sent: JSON, streamed, the system prompt first, the sampling fields as set.
  const { headers, body } = shown.request;
  assert.equal(headers['content-type'], 'application/json');
  assert.equal(body.stream, true);
  assert.deepEqual(body.messages, [
    { role: 'system', content: 'You answer in the voice of a butler.' }, { role: 'user', content: QUESTION }]);
  assert.equal(body.temperature, 0);
  assert.equal(body.max_tokens, 64);
  assert.equal(body.response_format, undefined, 'no structured output while the schema box is empty');
  // The same request answered whole gives the same text (greedy).
  const whole = await answerWhole(body);
  assert.equal(shown.text, whole.message.content);
  assert.equal(shown.finish, whole.finish_reason);
  assert.ok(shown.completionTokens > 0 && shown.completionTokens <= 64);
  await page.screenshot({ path: path.join(SHOTS, 'playground-chat.png') });
});

test('chat: greedy sends agree, a seed repeats, max_tokens shortens, the conversation carries on', async () => {
  await page.click('#clear');
  const first = await send(QUESTION);
  await page.click('#clear');
  const second = await send(QUESTION);
  assert.equal(first.state, 'done');
  assert.equal(second.text, first.text, 'temperature 0: two sends give the same answer');
  // A follow-up carries the conversation.
  const follow = await send('And then?');
  assert.equal(follow.state, 'done');
  assert.deepEqual(follow.request.body.messages.slice(1, 4).map((m) => m.role), ['user', 'assistant', 'user']);
  assert.equal(follow.request.body.messages[2].content, second.text);
  await page.click('#clear');
  await setField('max_tokens', '3');
  const short = await send(QUESTION);
  assert.equal(short.state, 'done');
  assert.equal(short.request.body.max_tokens, 3);
  assert.ok(short.completionTokens >= 1 && short.completionTokens <= 3, `${short.completionTokens} tokens`);
  assert.ok(short.text.length < first.text.length, 'a shorter answer');
  assert.ok(first.text.startsWith(short.text), 'greedy: the short answer begins the long one');
  // Sampled with a seed: the same seed, the same answer.
  await page.click('#clear');
  await setField('max_tokens', '24');
  await setField('temperature', '1');
  await setField('seed', '7');
  const seeded = await send(QUESTION);
  await page.click('#clear');
  const again = await send(QUESTION);
  assert.equal(seeded.request.body.seed, 7);
  assert.equal(seeded.request.body.temperature, 1);
  assert.equal(again.text, seeded.text);
  assert.equal(seeded.text, (await answerWhole(seeded.request.body)).message.content);
  await setField('seed', '');
  await setField('temperature', '0');
});

test('errors: the server\'s message appears in the chat; structured output carries response_format', async () => {
  await page.click('#clear');
  await setField('max_tokens', '16');
  // A value the server refuses: the page shows the server's own words.
  await setField('temperature', '3');
  const refused = await send(QUESTION);
  const direct = await post(server.base, '/v1/chat/completions', refused.request.body);
  assert.equal(direct.status, 400);
  assert.equal(refused.state, 'error');
  assert.ok(refused.error.includes(direct.json.error.message), `'${refused.error}' shows '${direct.json.error.message}'`);
  assert.ok(refused.error.startsWith('400'), refused.error);
  await setField('temperature', '0');

  // A schema that is not JSON is refused by the page, before any request.
  await setField('schema', '{"type": "object",');
  const sentBefore = chatRequests.length;
  const invalid = await send(QUESTION);
  assert.equal(invalid.state, 'error');
  assert.match(invalid.error, /not valid JSON/);
  assert.equal(chatRequests.length, sentBefore);

  // A schema: the request carries it as OpenAI's json_schema response format, and the page shows
  // what the server answers to it.
  const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  await setField('schema', JSON.stringify(schema, null, 2));
  await setField('schema-name', 'place');
  const structured = await send('Name a city.');
  assert.deepEqual(structured.request.body.response_format,
    { type: 'json_schema', json_schema: { name: 'place', schema, strict: true } });
  const answer = await post(server.base, '/v1/chat/completions', structured.request.body);
  if (answer.status >= 400) {
    assert.equal(structured.state, 'error');
    assert.ok(structured.error.includes(answer.json.error.message), `'${structured.error}' shows the server's message`);
  } else {
    assert.equal(structured.state, 'done', structured.error ?? '');
  }
  await setField('schema', '');
  assert.deepEqual(page.problems.filter((p) => !/status of 4\d\d/.test(p)), []);
});

test('dashboard: the charts move under a burst of 16 concurrent requests', async () => {
  await page.setViewport({ width: 1280, height: 1040 });  // every chart in the picture
  await page.click('#tab-dashboard');
  await page.select('#refresh', '250');
  await page.waitForFunction(() => window.kilnPlayground.dashboard.history.length >= 2, WAIT);
  const start = await page.evaluate(() => ({ ...window.kilnPlayground.dashboard.totals, now: Date.now() }));
  const plotted = () => page.evaluate((since) => {
    const d = window.kilnPlayground.dashboard;
    const after = (chart, i) => chart.data.series[i].values.filter((v, k) => chart.data.times[k] >= since && v !== null);
    return {
      running: after(d.charts.running, 0), tokens: after(d.charts.tokens, 0), requests: after(d.charts.requests, 0),
      kv: after(d.charts.cache, 0), ttft: after(d.charts.ttft, 0), itl: after(d.charts.itl, 0), totals: d.totals,
      state: d.state,
    };
  }, start.now);
  const body = { messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 256, ignore_eos: true,
                 temperature: 0.8 };
  let seen = null, shot = false;
  const burst = Promise.all(Array.from({ length: 16 }, (_, i) =>
    post(server.base, '/v1/chat/completions', { ...body, seed: i })));
  // While it runs: the page plots running requests and tokens per second.
  const deadline = Date.now() + 60000;
  let done = false;
  burst.then(() => { done = true; });
  while (Date.now() < deadline) {
    seen = await plotted();
    // The picture once a few points of the burst are on the charts.
    if (!shot && seen.running.filter((v) => v > 0).length >= 6 && seen.tokens.filter((v) => v > 0).length >= 6) {
      await page.screenshot({ path: path.join(SHOTS, 'playground-dashboard.png') });
      shot = true;
    }
    if (shot || done) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const answers = await burst;
  if (!shot) await page.screenshot({ path: path.join(SHOTS, 'playground-dashboard.png') });
  for (const a of answers) assert.equal(a.status, 200, a.text);
  assert.ok(seen.running.some((v) => v > 0), `running requests plotted: ${seen.running}`);
  assert.ok(seen.running.every((v) => v <= 16), 'never more running than --max-num-seqs');
  assert.ok(seen.tokens.some((v) => v > 0), `tokens/s plotted: ${seen.tokens}`);
  assert.ok(seen.kv.some((v) => v > 0), `KV usage plotted: ${seen.kv}`);
  assert.equal(seen.state, 'ok');
  // Afterwards the counters have gone up by the burst, and latencies have been plotted.
  const after = await page.waitForFunction((s) => {
    const t = window.kilnPlayground.dashboard.totals;
    return t.requests_finished >= s.requests_finished + 16 && t.generation_tokens >= s.generation_tokens + 16 * 256 && t;
  }, WAIT, start);
  const totals = await after.jsonValue();
  assert.ok(totals.requests_finished >= start.requests_finished + 16);
  const final = await plotted();
  assert.ok(final.requests.some((v) => v > 0), 'requests per second plotted');
  assert.ok(final.ttft.some((v) => v > 0), `TTFT p50 plotted: ${final.ttft}`);
  assert.ok(final.itl.some((v) => v > 0), `ITL p50 plotted: ${final.itl}`);
  const tiles = await page.$$eval('#tiles .tile', (els) => els.map((e) => e.textContent));
  assert.ok(tiles.some((t) => t.endsWith('tokens generated')), tiles.join(', '));
  await page.click('#tab-chat');
  await page.setViewport({ width: 1280, height: 800 });
});

test('API key: the page loads without it, asks for it, and works with it', async () => {
  const keyed = await startServer(['--api-key', 'sesame']);
  let p;
  try {
    assert.equal((await get(keyed.base, '/')).status, 200, 'the page is open');
    assert.equal((await get(keyed.base, '/ui/playground.js')).status, 200);
    assert.equal((await get(keyed.base, '/metrics')).status, 401);
    p = await openPage(keyed.base);
    await p.waitForFunction(() => document.getElementById('server-status').dataset.state === 'unauthorized', WAIT);
    await p.waitForFunction(() => document.getElementById('metrics-status').dataset.state === 'unauthorized', WAIT);
    assert.match(await p.$eval('#metrics-status', (e) => e.textContent), /API key/);
    await p.$eval('#api-key', (el) => { el.value = 'sesame'; el.dispatchEvent(new Event('change')); });
    await p.waitForFunction(() => document.getElementById('model').options.length > 0, WAIT);
    await p.waitForFunction(() => document.getElementById('metrics-status').dataset.state === 'ok', WAIT);
    await p.$eval('#max_tokens', (el) => { el.value = '8'; });
    await p.$eval('#prompt', (el) => { el.value = 'Hello'; });
    await p.click('#send');
    await p.waitForFunction(() => document.querySelector('.msg.assistant')?.dataset.state === 'done', WAIT);
    const sent = chatRequests[chatRequests.length - 1];
    assert.equal(sent.headers.authorization, 'Bearer sesame');
  } finally {
    await p?.close();
    assert.equal(await stopServer(keyed), 0);
  }
});

test('--no-ui: / is 404 and the API is unchanged', async () => {
  const plain = await startServer(['--no-ui']);
  try {
    const root = await get(plain.base, '/');
    assert.equal(root.status, 404);
    assert.equal(root.json.error.code, 'not_found');
    assert.equal((await get(plain.base, '/ui/playground.js')).status, 404);
    assert.equal((await post(plain.base, '/', {})).status, 404);
    assert.equal((await get(plain.base, '/v1/models')).status, 200);
    assert.doesNotMatch(plain.stdoutText(), /playground/);
    assert.match(server.stdoutText(), /playground \//);
  } finally {
    assert.equal(await stopServer(plain), 0);
  }
});
