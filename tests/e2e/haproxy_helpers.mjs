// haproxy in front of `kiln serve` replicas, with the configuration a deployment uses
// (deploy/haproxy/haproxy.cfg): start it in the foreground as a child process, read its state
// through the stats socket. Shared by tests/e2e/haproxy_test.mjs and bench/haproxy_affinity.mjs.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './server_helpers.mjs';

export const HAPROXY_CONFIG = path.resolve(path.dirname(fileURLToPath(import.meta.url)),
  '../../deploy/haproxy/haproxy.cfg');
export const HAPROXY = process.env.KILN_HAPROXY ||
  (fs.existsSync('/usr/sbin/haproxy') ? '/usr/sbin/haproxy' : 'haproxy');

// One command on haproxy's stats socket; resolves with the whole answer.
export function statsCommand(socketPath, command, { timeoutMs = 5000 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(socketPath);
    let data = '';
    const timer = setTimeout(() => { sock.destroy(); reject(new Error(`stats socket: no answer to ${command}`)); }, timeoutMs);
    sock.on('connect', () => sock.write(command + '\n'));
    sock.on('data', (d) => { data += d; });
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
    sock.on('close', () => { clearTimeout(timer); resolve(data); });
  });
}

// `show stat` as rows keyed by the CSV's column names (pxname, svname, status, check_status,
// wretr, wredis, ...).
export async function showStat(socketPath) {
  const lines = (await statsCommand(socketPath, 'show stat')).split('\n').filter((l) => l.length);
  const names = lines[0].replace(/^# /, '').split(',');
  return lines.slice(1).map((l) => Object.fromEntries(l.split(',').map((v, i) => [names[i], v])));
}

export async function serverRow(socketPath, name, backend = 'kiln_replicas') {
  return (await showStat(socketPath)).find((r) => r.pxname === backend && r.svname === name);
}

// Starts haproxy with deploy/haproxy/haproxy.cfg in front of `replicas` (three `host:port`
// strings), on free loopback ports, its stats socket in `dir`. Resolves once every replica's
// health check has passed. The process gets `base` (the client address), `statsBase` (stats page
// and /metrics), `socketPath` and `logText()` (its stderr: one line a request).
export async function startHaproxy(replicas, dir, { timeoutMs = 30000 } = {}) {
  if (replicas.length !== 3) throw new Error('deploy/haproxy/haproxy.cfg names three replicas');
  const port = await freePort();
  const statsPort = await freePort();
  const socketPath = path.join(dir, 'haproxy.sock');
  const env = {
    ...process.env,
    KILN_REPLICA_1: replicas[0], KILN_REPLICA_2: replicas[1], KILN_REPLICA_3: replicas[2],
    KILN_HAPROXY_BIND: `127.0.0.1:${port}`,
    KILN_HAPROXY_STATS_BIND: `127.0.0.1:${statsPort}`,
    KILN_HAPROXY_STATS_SOCKET: socketPath,
  };
  const proc = spawn(HAPROXY, ['-db', '-f', HAPROXY_CONFIG], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  proc.logText = () => log;
  proc.base = `http://127.0.0.1:${port}`;
  proc.statsBase = `http://127.0.0.1:${statsPort}`;
  proc.socketPath = socketPath;
  // Rejects if haproxy cannot run or exits before the replicas are up; settles once only.
  const spawned = new Promise((resolve, reject) => {
    proc.on('error', (e) => reject(new Error(`cannot run ${HAPROXY} (scripts/setup.sh installs haproxy): ${e.message}`)));
    proc.on('exit', (code) => reject(new Error(`haproxy exited with ${code}: ${log}`)));
  });
  spawned.catch(() => {});
  const end = Date.now() + timeoutMs;
  const allUp = (async () => {
    for (;;) {
      try {
        const rows = (await showStat(socketPath)).filter((r) => r.pxname === 'kiln_replicas' && r.svname !== 'BACKEND');
        if (rows.length === 3 && rows.every((r) => r.status === 'UP')) return;
      } catch { /* not listening yet */ }
      if (Date.now() > end) throw new Error(`haproxy: replicas not all UP within ${timeoutMs} ms: ${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  try {
    await Promise.race([allUp, spawned]);
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
  return proc;
}

// SIGTERM (haproxy stops at once); resolves with its exit code.
export function stopHaproxy(proc) {
  return new Promise((resolve) => {
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return resolve(proc?.exitCode);
    const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
    proc.on('exit', (code) => { clearTimeout(t); resolve(code); });
    proc.kill('SIGTERM');
  });
}
