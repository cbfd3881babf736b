// The model test's relay launcher: one hearth-relay on a fixed loopback port and data
// directory that can be killed with SIGKILL and started again on both (the e2e harness's
// startRelay takes a fresh port and directory each time, so clients could not reconnect to
// the same database after a crash).
import { spawn } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const relayBin = (root) => process.env.HEARTH_RELAY_BIN || join(root, 'target/debug/hearth-relay');

/** A free loopback port: bound once by Node, then released for the relay. */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** A relay on a port of its own with a fresh data directory; `start()` it (again after
 *  `kill9()`), `stop()` ends it and removes the directory. `log()` is the tail of its
 *  stderr across every run, for failure reports. */
export async function launchRelay(root) {
  const bin = relayBin(root);
  if (!existsSync(bin)) throw new Error(`${bin} is missing: cargo build -p hearth-relay --bin hearth-relay`);
  const data = mkdtempSync(join(tmpdir(), 'hearth-model-'));
  const port = await freePort();
  let proc = null;
  let lines = [];
  // HEARTH_MODEL_RELAY_LOG=<filter> (e.g. hearth_relay=trace) logs more and keeps the whole
  // log in HEARTH_MODEL_RELAY_LOG_FILE when that is set.
  const file = process.env.HEARTH_MODEL_RELAY_LOG_FILE;
  const note = (s) => {
    if (file) appendFileSync(file, String(s));
    lines = [...lines, ...String(s).split('\n').filter(Boolean)].slice(-40);
  };

  const once = () => new Promise((resolve, reject) => {
    const p = spawn(bin, ['serve', '--addr', `127.0.0.1:${port}`, '--data', data, '--heartbeat-ms', '500'],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HEARTH_LOG: process.env.HEARTH_MODEL_RELAY_LOG || 'warn' } });
    let out = '';
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error('the relay did not start in 20 s')); }, 20000);
    p.stderr.on('data', note);
    p.stdout.on('data', (d) => {
      out += d;
      if (/listening on/.test(out)) { clearTimeout(timer); resolve(p); }
    });
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      note(`[relay exited: ${code ?? signal}]`);
      reject(new Error(`the relay exited (${code ?? signal}) before listening`));
    });
  });

  const relay = {
    url: `ws://127.0.0.1:${port}`,
    get running() { return proc !== null; },
    log: () => lines.join('\n'),
    async start() {
      // The port may still be held for a moment by the killed process's sockets: retry.
      for (let attempt = 1; ; attempt++) {
        try {
          proc = await once();
          return;
        } catch (e) {
          if (attempt === 5) throw e;
          await new Promise((r) => setTimeout(r, 200 * attempt));
        }
      }
    },
    async kill9() {
      const p = proc;
      proc = null;
      if (!p || p.exitCode !== null) return;
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
    },
    async stop() {
      const p = proc;
      proc = null;
      if (p && p.exitCode === null) {
        const exited = new Promise((r) => p.once('exit', r));
        p.kill('SIGTERM');
        const timer = setTimeout(() => p.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(data, { recursive: true, force: true });
    },
  };
  await relay.start();
  return relay;
}
