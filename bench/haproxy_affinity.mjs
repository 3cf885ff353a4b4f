// Session affinity against round robin: three `kiln serve` replicas behind haproxy with
// deploy/haproxy/haproxy.cfg, driven by a multi-turn chat load. Each conversation opens with a
// message of its own and adds TURNS turns, each turn re-sending the whole history (as chat clients
// do) and streaming the answer. "affinity" sends the conversation's id in X-Session-Id, so that
// every turn reaches the replica that already holds its history; "round robin" sends no key.
// Each mode gets fresh replicas (empty caches) and the modes alternate over ROUNDS rounds.
// Prints, per round and mode: the prefix-cache hit rate summed over the replicas' /metrics
// (kiln_prefix_cache_hits_total / kiln_prefix_cache_queries_total, prompt tokens), the share of
// prompt tokens the responses report as cached, and the time to the first streamed token (TTFT)
// of the first turn and of the later turns; then the medians over the rounds and their ratios.
//
// Usage: KILN_BINARY=build/release/kiln node bench/haproxy_affinity.mjs \
//          [CONVERSATIONS=24] [TURNS=5] [CONCURRENCY=6] [ROUNDS=3] [REPLICA_FLAGS...]
// KILN_E2E_ENGINE=model.kiln picks the engine (default: kiln serve's demo engine).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execSync } from 'node:child_process';
import { startServer, stopServer, get, metricValue } from '../tests/e2e/server_helpers.mjs';
import { startHaproxy, stopHaproxy } from '../tests/e2e/haproxy_helpers.mjs';

const [conversations = '24', turns = '5', concurrency = '6', rounds = '3', ...replicaFlags] = process.argv.slice(2);
const C = Number(conversations), T = Number(turns), P = Number(concurrency), R = Number(rounds);
if (!process.env.KILN_BINARY || ![C, T, P, R].every((x) => Number.isInteger(x) && x > 0)) {
  console.error('usage: KILN_BINARY=kiln node bench/haproxy_affinity.mjs [CONVERSATIONS] [TURNS] [CONCURRENCY] [ROUNDS] [REPLICA_FLAGS...]');
  process.exit(2);
}
const REPLY_TOKENS = 32;

// Deterministic text: words drawn by a small linear congruential generator.
const WORDS = ('the keeper climbed stairs lamp glass storm ship harbour night wind salt rope bell tide ' +
  'island gull fog light signal boat north coast rock wave morning letter supply winter iron oil wick').split(' ');
function words(seed, n) {
  let x = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(WORDS[x % WORDS.length]);
  }
  return out.join(' ');
}
const SYSTEM = 'You are a patient narrator. Answer in the style of a ship\'s log.';

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};
const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

// One streamed turn: TTFT (to the first content delta), the answer, and the usage chunk.
async function turn(base, messages, headers) {
  const t0 = performance.now();
  const res = await fetch(base + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ messages, max_tokens: REPLY_TOKENS, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(120000),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let ttft = null, text = '', usage = null, buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const data = JSON.parse(event.slice(6));
      if (data.usage) usage = data.usage;
      const delta = data.choices?.[0]?.delta?.content;
      if (delta) {
        if (ttft === null) ttft = performance.now() - t0;
        text += delta;
      }
    }
  }
  return { ttft, text, usage, replica: res.headers.get('x-kiln-replica') };
}

async function runMode(mode, round, dir) {
  const replicas = await Promise.all([0, 1, 2].map(() => startServer(['--threads', '1', ...replicaFlags])));
  const haproxy = await startHaproxy(replicas.map((r) => `127.0.0.1:${r.port}`), dir);
  const ttfts = Array.from({ length: T }, () => []);
  let prompt = 0, cached = 0, switches = 0;
  const t0 = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < C) {
      const c = next++;
      const id = `r${round}-conversation-${c}`;
      const headers = mode === 'affinity' ? { 'x-session-id': id } : {};
      const messages = [{ role: 'system', content: SYSTEM },
        { role: 'user', content: `Log ${c}: ${words(1000 * round + c, 60)}` }];
      let last = null;
      for (let t = 0; t < T; t++) {
        const r = await turn(haproxy.base, messages, headers);
        ttfts[t].push(r.ttft);
        prompt += r.usage.prompt_tokens;
        cached += r.usage.prompt_tokens_details?.cached_tokens ?? 0;
        if (last !== null && r.replica !== last) switches++;
        last = r.replica;
        messages.push({ role: 'assistant', content: r.text }, { role: 'user', content: words(7 * c + t, 20) + '?' });
      }
    }
  };
  await Promise.all(Array.from({ length: P }, worker));
  const seconds = (performance.now() - t0) / 1000;
  let hits = 0, queries = 0;
  for (const r of replicas) {
    const m = (await get(r.base, '/metrics')).text;
    hits += metricValue(m, 'kiln_prefix_cache_hits_total');
    queries += metricValue(m, 'kiln_prefix_cache_queries_total');
  }
  await stopHaproxy(haproxy);
  await Promise.all(replicas.map(stopServer));
  const later = ttfts.slice(1).flat();
  return {
    mode, round, seconds, hitRate: hits / queries, hits, queries, cachedShare: cached / prompt, switches,
    ttftFirst: median(ttfts[0]), ttftLater: median(later), ttftLaterP90: quantile(later, 0.9),
    ttftByTurn: ttfts.map(median),
  };
}

const ms = (x) => x.toFixed(1);
const pct = (x) => (100 * x).toFixed(1) + '%';
let cpu = '';
try { cpu = execSync("lscpu | sed -n 's/^Model name: *//p'").toString().trim(); } catch { /* no lscpu */ }
console.log(`haproxy affinity bench: ${C} conversations x ${T} turns, ${P} at a time, ${REPLY_TOKENS} tokens an answer, ` +
  `${R} rounds; replicas: --threads 1 ${replicaFlags.join(' ')}`);
console.log(`machine: ${cpu}, ${os.cpus().length} cores; ${new Date().toISOString()}`);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-haproxy-bench-'));
const all = [];
try {
  for (let round = 0; round < R; round++) {
    const order = round % 2 ? ['round robin', 'affinity'] : ['affinity', 'round robin'];
    for (const mode of order) {
      const r = await runMode(mode, round, dir);
      all.push(r);
      console.log(`round ${round} ${mode.padEnd(11)}: hit rate ${pct(r.hitRate)} (${r.hits}/${r.queries} prompt tokens), ` +
        `cached in usage ${pct(r.cachedShare)}, replica changes ${r.switches}, TTFT turn 1 ${ms(r.ttftFirst)} ms, ` +
        `later turns p50 ${ms(r.ttftLater)} p90 ${ms(r.ttftLaterP90)} ms, by turn [${r.ttftByTurn.map(ms).join(', ')}] ms, ` +
        `${r.seconds.toFixed(1)} s`);
    }
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
const of = (mode, key) => median(all.filter((r) => r.mode === mode).map((r) => r[key]));
console.log('\nmedians over rounds      affinity   round robin   ratio');
for (const [label, key, f] of [['prefix-cache hit rate', 'hitRate', pct], ['cached share (usage)', 'cachedShare', pct],
  ['TTFT turn 1 (ms)', 'ttftFirst', ms], ['TTFT later turns p50', 'ttftLater', ms], ['TTFT later turns p90', 'ttftLaterP90', ms],
  ['wall time (s)', 'seconds', (x) => x.toFixed(1)]]) {
  const a = of('affinity', key), b = of('round robin', key);
  console.log(`${label.padEnd(24)} ${f(a).padStart(8)}   ${f(b).padStart(11)}   ${(a / b).toFixed(2)}x`);
}
