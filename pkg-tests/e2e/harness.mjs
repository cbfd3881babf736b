// Test harness: a real hearth-relay process, a static file server for the repository (so
// pages load /pkg/hearth.js), and headless Chromium driven by playwright-core.
import { before, after } from 'node:test';
import { spawn, spawnSync } from 'node:child_process';
import { createServer as createNetServer } from 'node:net';
import { cpSync, mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { startServer as serveRepository } from '../../scripts/lib/bench-page.mjs';

export const root = new URL('../../', import.meta.url).pathname;

/** Starts hearth-relay on a free loopback port with a fresh data directory: `url`, `http` and
 *  `stop()` (and what `startRelayProcess` gives). */
export async function startRelay(extraArgs = []) {
  return startRelayProcess(extraArgs);
}

/** Serves the repository read-only on a free loopback port (not cross-origin isolated). */
export function startServer() {
  return serveRepository({ isolated: false });
}

/** Reads a LEB128 varint (the protocol's, docs/protocol.md) from `b` at `at`: [value, next
 *  offset]. */
export function varint(b, at) {
  let v = 0;
  let mul = 1;
  for (;;) {
    const x = b[at++];
    v += (x & 0x7f) * mul;
    if (!(x & 0x80)) return [v, at];
    mul *= 128;
  }
}

/** Launches headless Chromium with a fresh profile (the flags TOOLCHAIN.md requires), or
 *  with `profile`, the directory of one a killed browser left (see `kill9`). */
export async function startBrowser(profile = mkdtempSync(join(tmpdir(), 'hearth-chromium-'))) {
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage'],
  });
  return {
    context,
    profile,
    async page(path) {
      const page = await context.newPage();
      page.on('pageerror', (e) => console.error('page error:', e));
      await page.goto(path);
      await page.waitForFunction(() => window.hearthReady === true, null, { timeout: 30000 });
      return page;
    },
    async stop() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
    /** Kills the browser process with SIGKILL (a crash: no unload, no flush), waits until
     *  none of its processes is left, and keeps the profile for `startBrowser(profile)`. */
    async kill9() {
      const pids = () => {
        const out = spawnSync('pgrep', ['-f', '--', `--user-data-dir=${profile}`], { encoding: 'utf8' }).stdout;
        return out.split('\n').filter(Boolean).map(Number);
      };
      const main = pids().find((pid) => {
        try { return !readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--type='); } catch { return false; }
      });
      if (main) process.kill(main, 'SIGKILL');
      for (let i = 0; i < 100 && pids().length; i++) await new Promise((r) => setTimeout(r, 50));
      for (const pid of pids()) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
      await context.close().catch(() => {});
    },
  };
}

/** The environment of one test file: a relay (started with `relayArgs`), a file server and a
 *  browser, started before its tests and stopped after them (node:test hooks). `env.page()`
 *  opens the test page, which loads the package, with `window.code` (`installCode`);
 *  `env.open(page, name, extra)` opens database `name` there with this relay (and `extra`
 *  options), kept as `window.db`;
 *  `env.serverRead(name, path)` reads a document from the relay through a fresh page (another
 *  client of database `name`): its data, or null if it does not exist. */
export function useEnvironment(relayArgs = []) {
  const env = {
    page: async () => {
      const p = await env.browser.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
      await installCode(p);
      return p;
    },
    open: (p, name, extra = {}) => p.evaluate(async ({ name, url, extra }) => {
      window.db = await window.hearth.Hearth.open({ name, relay: url, ...extra });
    }, { name, url: env.relay.url, extra }),
    serverRead: async (name, path) => {
      const q = await env.page();
      await env.open(q, name);
      const data = await q.evaluate(async (path) => {
        const s = await window.db.doc(path).get({ source: 'server' });
        return s.exists ? s.data() : null;
      }, path);
      await q.close();
      return data;
    },
  };
  before(async () => {
    env.relay = await startRelay(relayArgs);
    env.server = await startServer();
    env.browser = await startBrowser();
  });
  after(async () => {
    await env.browser?.stop();
    await env.server?.stop();
    await env.relay?.stop();
  });
  return env;
}

/** Installs the listener checks of `tracker.js` in page `p`: `window.track(query, options?,
 *  next?)`, a query listener that keeps its list only from docChanges(), as an app would, and
 *  checks the replay (type, oldIndex, newIndex) against `snapshot.docs` after every snapshot,
 *  with the snapshot's metadata against its documents'; and `window.trackDoc(ref, options?,
 *  next?)`, a document listener that checks each snapshot's `exists` against its data and
 *  that it changed something. Each returns a tracker (`snaps`, `errors`, `stop()`); `next`
 *  is the test's own callback, called after the checks. */
export async function installTracker(p) {
  await p.evaluate(async () => {
    const { install } = await import('/pkg-tests/e2e/tracker.js');
    install(window);
  });
}

/** Asserts that page `p` tracked a listener and that no tracker there found an error (a
 *  wrong replay, inconsistent metadata, a listen error) or a deviation from Firestore's
 *  raising rules (a snapshot without a change, a `modified` without a data change). */
export async function assertTrackersClean(p) {
  const trackers = await p.evaluate(() => window.trackers.map((t) => ({ what: t.what, errors: t.errors, deviations: t.deviations, snaps: t.snaps })));
  assertTrackers(trackers);
}

/** The assertion of `assertTrackersClean` over trackers already read (from a worker, say). */
export function assertTrackers(trackers) {
  assert.ok(trackers.length > 0, 'no listener was tracked');
  for (const t of trackers) {
    assert.deepEqual({ errors: t.errors, deviations: t.deviations }, { errors: [], deviations: [] }, `${t.what}: ${JSON.stringify(t.snaps)}`);
  }
}

/** Installs `window.code(f, ms = 10000)` in page `p`: how calling `f` (sync or async) ends:
 *  'ok', the error's `code` ('no code: …' for an error without one), or 'timed out' after
 *  `ms`. For asserting refusals by their code. */
export async function installCode(p) {
  await p.evaluate(() => {
    window.code = (f, ms = 10000) => Promise.race([
      (async () => f())().then(() => 'ok', (e) => e?.code ?? `no code: ${e?.message ?? e}`),
      new Promise((r) => setTimeout(() => r('timed out'), ms)),
    ]);
  });
}

/** Installs `window.jwt(claims)` in page `p`: an HS256 token signed with `secret` in the page
 *  (WebCrypto), as a token issuer would sign it. */
export async function signerIn(p, secret) {
  await p.evaluate((secret) => {
    const b64url = (bytes) => btoa(String.fromCharCode(...bytes))
      .replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_');
    const enc = (o) => b64url(new TextEncoder().encode(JSON.stringify(o)));
    window.jwt = async (claims, key = secret) => {
      const unsigned = `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc(claims)}`;
      const k = await crypto.subtle.importKey('raw', new TextEncoder().encode(key),
        { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
      const sig = await crypto.subtle.sign('HMAC', k, new TextEncoder().encode(unsigned));
      return `${unsigned}.${b64url(new Uint8Array(sig))}`;
    };
  }, secret);
}

/** Seed 000's printed lines grouped by the query that printed them: `{ '--- name: ': [symbol, ...] }`. */
export function seedGroups(lines) {
  const groups = {};
  let current;
  for (const l of lines) {
    if (l.startsWith('---')) { current = l; groups[current] = []; } else groups[current].push(JSON.parse(l.slice('doc = '.length)).symbol);
  }
  return groups;
}

/** Starts hearth-relay on a free loopback port with a fresh data directory, giving its
 *  addresses (`url`, `http`), `stop()` (which also removes the directory), its process id
 *  (`pid`), `signal(name)` to send it a signal (`SIGHUP` reloads its rules), `exited`, its
 *  exit as a promise, and `stderr()`. */
export async function startRelayProcess(extraArgs = [], indexes = undefined) {
  const data = mkdtempSync(join(tmpdir(), 'hearth-e2e-'));
  let relay;
  try {
    relay = await spawnRelayAt('127.0.0.1:0', data, extraArgs, indexes);
  } catch (e) {
    rmSync(data, { recursive: true, force: true });
    throw e;
  }
  return {
    ...relay,
    signal: relay.kill,
    async stop() {
      await relay.stop();
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** The development secret the demos sign their own tokens with (`www/dev-signin.js`), which
 *  `scripts/start` gives the relay. */
export const DEMO_SECRET = readFileSync(join(root, 'www/dev-signin.js'), 'utf8')
  .match(/DEV_SECRET = '([^']+)'/)[1];

/** Serves what `scripts/start` serves: `www/`, `pkg/` and `worker/` (copied to a directory of
 *  its own) from a relay with the demos' rules, their index file and the development secret.
 *  Gives the relay (`http`, `url`, ...); its `stop()` also removes the copy. */
export async function startDemos() {
  const site = mkdtempSync(join(tmpdir(), 'hearth-site-'));
  for (const dir of ['www', 'pkg', 'worker']) cpSync(join(root, dir), join(site, dir), { recursive: true });
  const relay = await startRelayProcess(['--rules', join(root, 'rules/demos.rules'),
    '--auth-secret', DEMO_SECRET, '--static-dir', site], join(root, 'www/demos.indexes.json'));
  return { ...relay, async stop() { await relay.stop(); rmSync(site, { recursive: true, force: true }); } };
}

/** A demo test's environment: `startDemos()` as `env.relay` and one Chromium profile per
 *  name in `profiles` (`env[name]`), started before the file's tests and stopped after. */
export function useDemos(...profiles) {
  const env = {};
  before(async () => {
    env.relay = await startDemos();
    for (const name of profiles) env[name] = await startBrowser();
  });
  after(async () => {
    for (const name of profiles) await env[name]?.stop();
    await env.relay?.stop();
  });
  return env;
}

/** A new page of `browser` at `viewport`, its errors logged under `name`, opened at `path`
 *  of the demos' relay `relay`. */
export async function demoPage(browser, relay, path, name, viewport = { width: 1280, height: 800 }) {
  const p = await browser.context.newPage();
  await p.setViewportSize(viewport);
  p.on('pageerror', (e) => console.error(`${name}: page error:`, e));
  await p.goto(`${relay.http}${path}`);
  return p;
}

/** Starts hearth-relay at `addr` (`127.0.0.1:0`: a free port) on data directory `data`,
 *  which it leaves in place, so that a relay killed with `kill(9)` can be started again on
 *  the same directory and port (the fault tests). Gives `url`, `http`, `addr`, `pid`,
 *  `exited`, `stderr()`, `kill(signal)` and `stop()` (SIGTERM, then waits for the exit).
 *  `indexes`: the index file it serves (the seeds' by default). */
export async function spawnRelayAt(addr, data, extraArgs = [], indexes = join(root, 'pkg-tests/e2e/indexes.json')) {
  const bin = process.env.HEARTH_RELAY_BIN || join(root, 'target/debug/hearth-relay');
  if (!existsSync(bin)) throw new Error(`${bin} is missing: cargo build -p hearth-relay --bin hearth-relay`);
  const proc = spawn(bin, ['serve', '--addr', addr, '--data', data,
    '--indexes', indexes, '--heartbeat-ms', '500', ...extraArgs],
  { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HEARTH_LOG: process.env.HEARTH_LOG || 'warn' } });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
  const bound = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`relay did not start: ${stderr}`)), 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`relay exited ${code}: ${stderr}`)); });
  });
  return {
    url: `ws://${bound}`,
    http: `http://${bound}`,
    addr: bound,
    pid: proc.pid,
    exited,
    stderr: () => stderr,
    kill: (signal) => proc.kill(signal),
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

/** A loopback TCP port free at the time of asking (for servers the tests start on a port of
 *  their choosing: PostgreSQL, a relay started again on its port). */
export async function freePort() {
  const s = createNetServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}
