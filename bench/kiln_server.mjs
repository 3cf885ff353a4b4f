// Starts `kiln KILN_ARGS...` (a serve command with --port 0) for the bench scripts and resolves
// with the process and its base URL once its ready line names the port.
import { spawn } from 'node:child_process';

export async function startKiln(kiln, args) {
  const server = spawn(kiln, args, { stdio: ['ignore', 'pipe', 'ignore'] });
  const base = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/ready on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`kiln serve exited with ${code}`)));
  });
  return { server, base };
}
