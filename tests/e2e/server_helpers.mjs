// Helpers for the end-to-end tests: start `kiln serve` on a free loopback port, talk HTTP to it
// (fetch, raw sockets, curl) and read its metrics. Every wait is bounded.
import { spawn, execFile } from 'node:child_process';
import net from 'node:net';
import { createRequire } from 'node:module';
import path from 'node:path';

export const KILN = process.env.KILN_BINARY;
export const E2E_DIR = process.env.KILN_E2E_DIR;
export const ENGINE = process.env.KILN_E2E_ENGINE || '';  // empty: kiln serve's own demo engine

// The openai client, installed by tests/e2e/setup.sh into KILN_E2E_DIR.
export function openaiModule() {
  if (!E2E_DIR) throw new Error('KILN_E2E_DIR is not set; run tests/e2e/setup.sh DIR first');
  const require = createRequire(path.join(E2E_DIR, 'package.json'));
  return require('openai');
}

// Starts a server; resolves once its ready line names the port. `args`: extra flags (two compute
// threads unless they name --threads).
export function startServer(args = [], { timeoutMs = 600000 } = {}) {
  return new Promise((resolve, reject) => {
    const threads = args.includes('--threads') ? [] : ['--threads', '2'];
    const argv = ['serve', ...(ENGINE ? [ENGINE] : []), '--host', '127.0.0.1', '--port', '0', ...threads, ...args];
    const proc = spawn(KILN, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`server did not start: ${err}`)); }, timeoutMs);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/ready on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && !proc.port) {
        clearTimeout(timer);
        proc.port = Number(m[1]);
        proc.base = `http://127.0.0.1:${proc.port}`;
        proc.stdoutText = () => out;
        resolve(proc);
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.stderrText = () => err;
    proc.on('exit', (code) => {
      proc.exitCode_ = code;
      if (!proc.port) { clearTimeout(timer); reject(new Error(`server exited with ${code}: ${err}`)); }
    });
  });
}

export function stopServer(proc) {
  return new Promise((resolve) => {
    if (!proc || proc.exitCode !== null) return resolve(proc?.exitCode);
    const t = setTimeout(() => proc.kill('SIGKILL'), 60000);
    proc.on('exit', (code) => { clearTimeout(t); resolve(code); });
    proc.kill('SIGTERM');
  });
}

export async function post(base, p, body, headers = {}) {
  const res = await fetch(base + p, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

export async function get(base, p, headers = {}) {
  const res = await fetch(base + p, { headers });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

// The data payloads of a server-sent event body.
export function sseData(text) {
  return text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
}

// Sends raw bytes on a fresh connection and returns everything the server answers before closing
// (or `waitMs` passes).
export function rawRequest(port, chunks, { waitMs = 20000, gapMs = 0 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    const done = () => { sock.destroy(); resolve(data); };
    const timer = setTimeout(done, waitMs);
    sock.on('data', (d) => { data += d; });
    sock.on('close', () => { clearTimeout(timer); resolve(data); });
    sock.on('error', () => {});
    sock.on('connect', async () => {
      for (const c of chunks) {
        sock.write(c);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
  });
}

export function statusOf(rawResponse) {
  const m = rawResponse.match(/^HTTP\/1\.1 (\d{3})/);
  return m ? Number(m[1]) : 0;
}

// One sample of a metric (labels as an object), or undefined.
export function metricValue(text, name, labels = {}) {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (.+)$/);
    if (!m || m[1] !== name) continue;
    const have = {};
    for (const kv of (m[3] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) have[kv[1]] = kv[2];
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[4]);
  }
  return undefined;
}

export async function waitFor(fn, { timeoutMs = 60000, stepMs = 100 } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export function curl(args) {
  return new Promise((resolve, reject) => {
    execFile('curl', ['-sS', '--max-time', '300', ...args], { maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`curl ${args.join(' ')}: ${stderr}`));
      else resolve(stdout);
    });
  });
}

// A port that was free a moment ago.
export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}
