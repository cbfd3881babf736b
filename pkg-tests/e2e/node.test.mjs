// The npm package in Node, as trusted server code: a service token past the security rules,
// with `fake-indexeddb` for IndexedDB and `ws` for WebSocket (Node 20 has neither; Node 22's
// own WebSocket works too). The seeds' server code runs unchanged; a client token is held to
// the rules. Run: node --test pkg-tests/e2e/
import 'fake-indexeddb/auto';
import WebSocket from 'ws';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { root, seedGroups, startRelay } from './harness.mjs';

globalThis.WebSocket ??= WebSocket;

const CLIENT = 'hearth-node-client-secret';
const SERVICE = 'hearth-node-service-secret';

/** An HS256 JWT for `sub`, signed with `secret`, valid for ten minutes. */
function jwt(sub, secret) {
  const enc = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const unsigned = `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc({ sub, exp: Math.floor(Date.now() / 1000) + 600 })}`;
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`;
}

let relay;
let hearth;
before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-node-'));
  const rules = join(dir, 'firestore.rules');
  // Nothing is open to clients: only server code reads and writes.
  writeFileSync(rules, "rules_version = '2';\nservice cloud.firestore { match /databases/{database}/documents { } }\n");
  relay = await startRelay(['--rules', rules, '--auth-secret', CLIENT, '--service-secret', SERVICE]);
  hearth = await import(join(root, 'pkg/hearth.js'));
  await hearth.default({ module_or_path: readFileSync(join(root, 'pkg/hearth_bg.wasm')) });
});
after(async () => { await relay?.stop(); });

test('server code in Node: a service token runs the seed code past the rules, live', { timeout: 60000 }, async () => {
  const db = await hearth.Hearth.open({ name: 'node-seeds', relay: relay.url, token: jwt('seed-job', SERVICE) });
  const seen = [];
  const stop = db.collection('instruments').where('exchange', '==', 'EXCHG1')
    .onSnapshot((s) => seen.push(s.size), (e) => seen.push(`error ${e.code}`));
  const { seed000 } = await import(join(root, 'pkg-tests/e2e/seed000.js'));
  const lines = await seed000(db, hearth.Timestamp);
  const groups = seedGroups(lines);
  assert.deepEqual(groups['--- queryCommonStock: '], ['BBB', 'AAA']);
  assert.deepEqual(groups['--- queryExchange1Instruments: '], ['AAA', 'Index1 ETF']);
  const server = await db.collection('instruments').get({ source: 'server' });
  assert.ok(server.size >= 3, `${server.size} instruments on the relay`);
  const deadline = Date.now() + 10000;
  while (!seen.includes(2) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.ok(seen.includes(2), `the listener saw the EXCHG1 instruments: ${JSON.stringify(seen)}`);
  assert.ok(!seen.some((x) => typeof x === 'string'), JSON.stringify(seen));
  stop();
  db.close();
});

test('a client token in Node is held to the rules', { timeout: 60000 }, async () => {
  const db = await hearth.Hearth.open({ name: 'node-client', relay: relay.url, token: jwt('alice', CLIENT) });
  const code = await db.doc('instruments/x').set({ symbol: 'X' }).then(() => 'ok', (e) => e.code);
  assert.equal(code, 'permission-denied');
  const read = await db.doc('instruments/x').get({ source: 'server' }).then(() => 'ok', (e) => e.code);
  assert.equal(read, 'permission-denied');
  db.close();
});
