// Three `kiln serve` replicas behind haproxy with deploy/haproxy/haproxy.cfg, all real processes on
// loopback: session affinity (X-Session-Id, else the body's `user`, else round robin) checked
// against each replica's own /metrics, then one replica killed under a steady load of streamed and
// non-streamed requests: nothing hangs, what the dead replica had taken fails at once and is not
// sent again, what it had not taken is sent elsewhere, the health check marks it DOWN, and only its
// own conversations move. Run by CTest (label e2e) with KILN_BINARY, KILN_E2E_DIR and KILN_HAPROXY
// set.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startServer, stopServer, get, sseData, metricValue, waitFor } from './server_helpers.mjs';
import { startHaproxy, stopHaproxy, serverRow } from './haproxy_helpers.mjs';

const NAMES = ['replica1', 'replica2', 'replica3'];   // the server names in haproxy.cfg, in order
const CLIENT_TIMEOUT_MS = 20000;                        // no request may take longer
// A system prompt of a few KV blocks, so that a conversation's later turns can hit the prefix cache.
const SYSTEM = 'You are a patient narrator who tells short stories about a lighthouse keeper, '.repeat(4);

let dir;
let replicas = [];   // kiln serve processes; replicas[i] is haproxy's NAMES[i]
let haproxy;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-haproxy-'));
  replicas = await Promise.all(NAMES.map(() => startServer(['--threads', '1', '--max-num-seqs', '16'])));
  haproxy = await startHaproxy(replicas.map((r) => `127.0.0.1:${r.port}`), dir);
});

after(async () => {
  if (haproxy) await stopHaproxy(haproxy);
  for (const r of replicas) if (r.exitCode === null && r.signalCode === null) assert.equal(await stopServer(r), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

// One request through haproxy, classified: 'ok' (200 and a whole answer), 'http-error' (an HTTP
// status other than 200), 'cut' (a streamed 200 whose body ended before [DONE]), 'closed' (the
// connection closed before any response: what haproxy does, as HTTP/1.1 prescribes, when a replica
// dies under a request that was not the first on its client's keep-alive connection), 'hung' (the
// client timeout struck) or 'network' (any other failure to talk to haproxy).
async function send(body, headers = {}) {
  const stream = Boolean(body.stream);
  const r = { start: performance.now(), stream };
  try {
    const res = await fetch(haproxy.base + (body.messages ? '/v1/chat/completions' : '/v1/completions'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
    });
    r.status = res.status;
    r.replica = res.headers.get('x-kiln-replica');
    let text;
    try {
      text = await res.text();
    } catch (e) {
      r.outcome = e.name === 'TimeoutError' ? 'hung' : 'cut';
      r.error = String(e.cause ?? e);
      return r;
    }
    if (res.status !== 200) {
      r.outcome = 'http-error';
    } else if (stream) {
      const data = sseData(text);
      r.outcome = data.at(-1) === '[DONE]' ? 'ok' : 'cut';
      r.text = data.slice(0, -1).map((d) => JSON.parse(d).choices[0]?.delta?.content ?? '').join('');
    } else {
      r.json = JSON.parse(text);
      r.outcome = r.json.usage?.completion_tokens > 0 ? 'ok' : 'bad-body';
    }
  } catch (e) {
    r.outcome = e.name === 'TimeoutError' ? 'hung' : e.cause?.code === 'UND_ERR_SOCKET' ? 'closed' : 'network';
    r.error = String(e.cause ?? e);
  } finally {
    r.end = performance.now();
  }
  return r;
}

// A plain completion on a connection of its own (no keep-alive): haproxy answers it with a status
// even when its replica dies under it, as it does for the first request of any connection.
function sendFresh(body, headers = {}) {
  const r = { start: performance.now(), stream: false };
  return new Promise((resolve) => {
    const done = (fields) => { Object.assign(r, fields, { end: performance.now() }); resolve(r); };
    const { hostname, port } = new URL(haproxy.base);
    const req = http.request({
      host: hostname, port, path: '/v1/completions', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', ...headers },
    }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => done({ status: res.statusCode, replica: res.headers['x-kiln-replica'],
        outcome: res.statusCode === 200 ? 'ok' : 'http-error', text }));
      res.on('error', (e) => done({ status: res.statusCode, outcome: 'cut', error: String(e) }));
    });
    req.setTimeout(CLIENT_TIMEOUT_MS, () => { req.destroy(); done({ outcome: 'hung' }); });
    req.on('error', (e) => { if (r.outcome === undefined) done({ outcome: 'network', error: String(e) }); });
    req.end(JSON.stringify(body));
  });
}

const chatTurn = (messages) => ({ messages, max_tokens: 8, temperature: 0, ignore_eos: true });

async function chatRequestsByReplica() {
  return Promise.all(replicas.map(async (r) =>
    metricValue((await get(r.base, '/metrics')).text, 'kiln_http_requests_total',
      { endpoint: 'chat_completions', status: '200' }) ?? 0));
}

// Where each of `sessions` goes now (one short request each, with X-Session-Id).
async function placement(sessions) {
  const out = {};
  for (const s of sessions) {
    const r = await send(chatTurn([{ role: 'user', content: 'Hello?' }]), { 'x-session-id': s });
    assert.equal(r.outcome, 'ok', `session ${s}: ${r.status} ${r.error ?? ''}`);
    out[s] = r.replica;
  }
  return out;
}

const SESSIONS = Array.from({ length: 12 }, (_, i) => `conversation-${i}`);
let placedBefore = {};  // session -> replica name, measured while all three are up
let victimName;         // the replica killed: the one holding the most conversations

function mostConversations() {
  const count = (n) => Object.values(placedBefore).filter((x) => x === n).length;
  return NAMES.reduce((a, b) => (count(b) > count(a) ? b : a));
}

test('a conversation stays on one replica and reuses its prefix cache; /metrics agrees', async () => {
  const counted = await chatRequestsByReplica();
  const turns = 3;
  const seen = await Promise.all(SESSIONS.map(async (s) => {
    const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: `Tell me about ${s}.` }];
    const out = [];
    for (let t = 0; t < turns; t++) {
      const r = await send(chatTurn(messages), { 'x-session-id': s });
      assert.equal(r.outcome, 'ok', `${s} turn ${t}: ${r.status} ${r.error ?? ''}`);
      out.push({ replica: r.replica, cached: r.json.usage.prompt_tokens_details?.cached_tokens ?? 0 });
      messages.push(r.json.choices[0].message, { role: 'user', content: `And then, turn ${t + 2}?` });
    }
    return out;
  }));
  const perReplica = Object.fromEntries(NAMES.map((n) => [n, 0]));
  SESSIONS.forEach((s, i) => {
    const names = new Set(seen[i].map((x) => x.replica));
    assert.equal(names.size, 1, `${s} went to ${[...names]}`);
    assert.ok(NAMES.includes(seen[i][0].replica), `X-Kiln-Replica names a server: ${seen[i][0].replica}`);
    for (let t = 1; t < turns; t++) assert.ok(seen[i][t].cached > 0, `${s} turn ${t} found its history in the prefix cache`);
    perReplica[seen[i][0].replica] += turns;
    placedBefore[s] = seen[i][0].replica;
  });
  assert.ok(new Set(Object.values(placedBefore)).size >= 2, 'sessions are spread over the replicas');
  // Each replica's own request counter moved by exactly the turns haproxy says it sent there.
  const now = await chatRequestsByReplica();
  NAMES.forEach((n, i) => assert.equal(now[i] - counted[i], perReplica[n], `${n}'s /metrics`));
});

test('without the header, the body\'s user field is the key; without either, round robin', async () => {
  const byHeader = await placement(SESSIONS.slice(0, 6));
  for (const s of SESSIONS.slice(0, 6)) {
    for (let k = 0; k < 2; k++) {
      const r = await send({ ...chatTurn([{ role: 'user', content: 'Hi' }]), user: s });
      assert.equal(r.outcome, 'ok');
      assert.equal(r.replica, byHeader[s], `user ${s} goes where X-Session-Id ${s} goes`);
    }
  }
  const keyless = [];
  for (let k = 0; k < 9; k++) keyless.push((await send(chatTurn([{ role: 'user', content: 'Hi' }]))).replica);
  assert.ok(new Set(keyless).size >= 2, `requests with no key are spread: ${keyless}`);
});

test('a replica killed under load: nothing hangs, what it held fails at once and is not replayed, the rest goes elsewhere, the check takes it out', async (t) => {
  victimName = mostConversations();
  const victim = replicas[NAMES.indexOf(victimName)];
  const statsBefore = await serverRow(haproxy.socketPath, 'BACKEND');

  // Eight closed-loop clients, half streaming chat and half plain completions, each request with
  // a session key of its own so that the load spreads over the three replicas.
  const results = [];
  let stop = false;
  let n = 0;
  const clients = Array.from({ length: 8 }, (_, c) => (async () => {
    while (!stop) {
      const i = n++;
      const body = c % 2
        ? { messages: [{ role: 'user', content: `Question ${i}: who keeps the light?` }], max_tokens: 24, ignore_eos: true, stream: true }
        : { prompt: `Request ${i}: It was a dark night and`, max_tokens: 24, ignore_eos: true };
      results.push(await send(body, { 'x-session-id': `load-${i}` }));
    }
  })());

  // Kill once the victim is busy serving its share, and holds four long requests of conversations
  // that hash to it: two streamed, two plain.
  const busy = await waitFor(() => results.filter((r) => r.outcome === 'ok' && r.replica === victimName).length >= 4,
    { timeoutMs: 30000, stepMs: 20 });
  if (!busy) {
    stop = true;
    await Promise.all(clients);
    assert.fail('the victim answered none of the load');
  }
  const ownSessions = SESSIONS.filter((s) => placedBefore[s] === victimName).slice(0, 2);
  const long = { max_tokens: 400, ignore_eos: true };
  const pinned = [
    ...ownSessions.map((s) => sendFresh({ prompt: 'Once upon a time', ...long }, { 'x-session-id': s })),
    ...ownSessions.map((s) => send({ messages: [{ role: 'user', content: 'A long story, please.' }], ...long, stream: true },
      { 'x-session-id': s })),
  ];
  await new Promise((r) => setTimeout(r, 300));
  const exited = new Promise((resolve) => victim.on('exit', resolve));
  const tKill = performance.now();
  victim.kill('SIGKILL');
  await exited;
  const tDead = performance.now();

  // The health check marks it DOWN (inter 1s, fall 2); poll the stats socket for it.
  let down = null;
  while (performance.now() - tKill < 15000) {
    const row = await serverRow(haproxy.socketPath, victimName);
    if (row.status.startsWith('DOWN')) { down = { at: performance.now(), row }; break; }
    await new Promise((r) => setTimeout(r, 50));
  }
  // Keep the load on for a while with the victim out.
  await new Promise((r) => setTimeout(r, 2000));
  stop = true;
  await Promise.all(clients);

  // The requests the victim had taken fail at once and are not sent again: the plain ones get
  // haproxy's 502, the streams (already answering 200) are cut.
  const held = await Promise.all(pinned);
  for (const r of held) {
    const what = JSON.stringify({ ...r, text: undefined, start: r.start - tKill, end: r.end - tKill });
    assert.ok(r.end > tKill, `a long request was still running at the kill: ${what}`);
    assert.ok(r.end - tKill < 2000, `it fails within 2 s of the kill: ${what}`);
    if (r.stream) assert.equal(r.outcome, 'cut', `a stream under way is cut: ${what}`);
    else assert.equal(r.status, 502, `a request the dead replica had taken is answered 502, not replayed: ${what}`);
  }

  assert.ok(down, `${victimName} is marked DOWN`);
  const downMs = down.at - tKill;
  assert.ok(downMs < 4000, `DOWN ${downMs.toFixed(0)} ms after the kill (checks every 1 s, two failures)`);
  assert.match(down.row.check_status, /^L4/, `the failed check is a connection failure: ${down.row.check_status}`);
  for (const name of NAMES.filter((x) => x !== victimName)) {
    assert.equal((await serverRow(haproxy.socketPath, name)).status, 'UP', `${name} stays UP`);
  }

  const by = (o) => results.filter((r) => r.outcome === o);
  const summary = Object.fromEntries(['ok', 'http-error', 'cut', 'closed', 'hung', 'network', 'bad-body'].map((o) => [o, by(o).length]));
  const failed = results.filter((r) => r.outcome !== 'ok');
  const detail = JSON.stringify({ summary, downMs: Math.round(downMs),
    failed: failed.map((r) => ({ status: r.status, outcome: r.outcome, replica: r.replica, error: r.error,
      start: Math.round(r.start - tKill), end: Math.round(r.end - tKill) })) });
  t.diagnostic(`${victimName} killed: ${detail}`);
  assert.equal(summary.hung, 0, `no request hangs: ${detail}`);
  assert.equal(summary.network + summary['bad-body'], 0, `every answer is a whole answer, an HTTP error or a close: ${detail}`);
  for (const r of failed) {
    // What fails is what the victim was running when it died, and it fails at once.
    assert.ok(r.start < tDead, `a request sent after the kill failed: ${detail}`);
    assert.ok(r.end - tKill < 2000, `a failure takes no longer than the dying: ${detail}`);
    if (r.outcome === 'http-error') assert.ok([502, 503, 504].includes(r.status), `a gateway error: ${detail}`);
    if (r.outcome === 'cut') assert.ok(r.stream, `only a stream already under way is cut: ${detail}`);
  }
  // Requests sent after the victim died all succeeded, the early ones through a retry elsewhere.
  const after = results.filter((r) => r.start >= tDead);
  const beforeDown = after.filter((r) => r.start < down.at);
  assert.ok(after.length >= 10, `load went on after the kill: ${after.length} requests`);
  assert.ok(beforeDown.length >= 3, `requests arrived before the check took it out: ${beforeDown.length}`);
  assert.ok(after.every((r) => r.outcome === 'ok' && r.replica !== victimName), `after the kill every request succeeds elsewhere: ${detail}`);
  const statsAfter = await serverRow(haproxy.socketPath, 'BACKEND');
  const redispatched = Number(statsAfter.wredis) - Number(statsBefore.wredis);
  t.diagnostic(`${after.length} requests after the kill, ${beforeDown.length} before DOWN; ${redispatched} redispatched`);
  assert.ok(redispatched > 0, `haproxy counts redispatches: ${redispatched}`);
  const redispatchLines = haproxy.logText().split('\n').filter((l) => / 200 .* \d+\/\d+\/\d+\/\d+\/\+\d+ /.test(l));
  assert.ok(redispatchLines.length > 0, 'its log shows requests answered after a redispatch');

  // haproxy's own Prometheus endpoint says the same.
  const prom = (await get(haproxy.statsBase, '/metrics')).text;
  assert.equal(metricValue(prom, 'haproxy_server_status', { proxy: 'kiln_replicas', server: victimName, state: 'DOWN' }), 1);
  assert.ok(metricValue(prom, 'haproxy_backend_redispatch_warnings_total', { proxy: 'kiln_replicas' }) > 0);
});

test('consistent hashing: with one replica out, only its own conversations move', async () => {
  const now = await placement(SESSIONS);
  assert.ok(SESSIONS.some((s) => placedBefore[s] === victimName), 'some conversations lived on the killed replica');
  for (const s of SESSIONS) {
    if (placedBefore[s] === victimName) assert.notEqual(now[s], victimName, `${s} moved off the dead replica`);
    else assert.equal(now[s], placedBefore[s], `${s} stays where its cache is`);
  }
});
