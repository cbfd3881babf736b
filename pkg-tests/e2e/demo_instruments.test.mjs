// End-to-end test of the instruments dashboard demo (www/instruments/): the page served from
// a real relay with rules/demos.rules and the index file scripts/start gives it; one
// Chromium profile writes at 1,000 updates a second while another only watches. With
// HEARTH_SCREENSHOTS=1 it also writes docs/screenshots/instruments-desktop.png and
// instruments-phone.png.
// Run: node --test pkg-tests/e2e/demo_instruments.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { root, demoPage, useDemos } from './harness.mjs';

const CHOICES = { exchange: ['EXCHG1', 'EXCHG2', 'EXCHG3'], instrumentType: ['commonstock', 'etf', 'bond'],
  'price.currency': ['USD', 'JPY', 'EUR'] };
const env = useDemos('writer', 'viewer');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));


async function open(browser, name, viewport = { width: 1280, height: 900 }) {
  const p = await demoPage(browser, env.relay, `/www/instruments/`, name, viewport);
  await p.waitForFunction(() => window.hearthReady === true, null, { timeout: 30000 });
  await p.waitForSelector('#conn.online');
  return p;
}

/** The figures page `p` shows, as numbers (NaN for "–"). */
const figures = (p) => p.evaluate(() => Object.fromEntries(['acked', 'seen', 'p50', 'p99']
  .map((id) => [id, Number(document.getElementById(id).textContent.replace(/,/g, ''))])));
/** The writer's counts from its status line: [created, acknowledged]. */
const writerCounts = async (p) => {
  const m = (await p.textContent('#writer-state')).replace(/,/g, '').match(/(\d+) updates,? (\d+) acknowledged/);
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
};
/** The document ids each view of page `p` shows, by field. */
const views = (p) => p.evaluate(() => Object.fromEntries([...document.querySelectorAll('.view')]
  .map((v) => [v.dataset.field, [...v.querySelectorAll('li')].map((li) => li.dataset.id)])));
test('the instruments demo: a writer at 1,000/s, a second profile watching the latest 5 live, figures, rules, a phone viewport', { timeout: 120000 }, async () => {
  // The page opens with the index file scripts/start gives the relay.
  assert.match(readFileSync(join(root, 'www/instruments/app.js'), 'utf8'), /fetch\('\.\.\/demos\.indexes\.json'\)/);
  assert.match(readFileSync(join(root, 'scripts/start'), 'utf8'), /www\/demos\.indexes\.json/);
  const w = await open(env.writer, 'writer');
  const v = await open(env.viewer, 'viewer');
  assert.equal(await v.textContent('#p50'), '–');

  // The writer at 1,000/s for about 6 s; the viewer's views change live all along.
  await w.selectOption('#rate', '1000');
  await w.click('#writer');
  const firstRows = new Set();
  const started = Date.now();
  let mid;
  while (Date.now() - started < 6000) {
    await sleep(250);
    firstRows.add((await views(v)).exchange[0]);
    if (!mid && Date.now() - started > 3000) mid = { at: Date.now(), counts: await writerCounts(w) };
  }
  const end = { at: Date.now(), counts: await writerCounts(w) };
  const wf = await figures(w);
  const vf = await figures(v);
  const ackRate = ((end.counts[1] - mid.counts[1]) * 1000) / (end.at - mid.at);
  console.log(`# writer: ${end.counts[0]} written, ${end.counts[1]} acknowledged in ${end.at - started} ms; `
    + `acknowledged ${Math.round(ackRate)}/s measured; shown: writer ${JSON.stringify(wf)}, viewer ${JSON.stringify(vf)}`);
  assert.ok(firstRows.size >= 5, `the viewer's newest row changed live (${firstRows.size} distinct)`);
  assert.ok(ackRate > 0 && end.counts[1] > 0, 'the relay acknowledged writes');
  // The figures shown agree with what the test measured, and are plausible.
  assert.ok(wf.acked > 0 && wf.acked <= 1500, `writer's acknowledged rate ${wf.acked}`);
  assert.ok(wf.acked > ackRate / 2 && wf.acked < ackRate * 2, `shown ${wf.acked}/s, measured ${Math.round(ackRate)}/s`);
  assert.ok(vf.seen > ackRate / 3 && vf.seen < ackRate * 3, `viewer saw ${vf.seen}/s, relay acknowledged ${Math.round(ackRate)}/s`);
  assert.ok(Number.isNaN(vf.acked), 'the viewer wrote nothing');
  assert.ok(vf.p50 > 0 && vf.p50 <= vf.p99 && vf.p99 < 20000, `viewer latency p50 ${vf.p50} ms, p99 ${vf.p99} ms`);
  assert.ok(Number.isNaN(wf.p50), 'the writer measures latency only for other pages\' updates');

  // Stopped, every update is acknowledged, and the relay has each exactly once.
  await w.click('#writer');
  await w.waitForFunction(() => /^Stopped after ([\d,]+) updates, \1 acknowledged/.test(document.getElementById('writer-state').textContent)
    && document.getElementById('pending').hidden, null, { timeout: 30000 });
  const [written] = await writerCounts(w);
  const all = await v.evaluate(async () => {
    const { openFirestore, collection, getDocsFromServer } = await import('/pkg/firestore.js');
    const db = await openFirestore({ name: 'instruments', relay: `ws://${location.host}` });
    const snap = await getDocsFromServer(collection(db, 'instruments'));
    return snap.docs.map((d) => {
      const u = d.data();
      return { id: d.id, seq: u.seq, shard: u.shard, exchange: u.exchange, instrumentType: u.instrumentType,
        'price.currency': u.price.currency, micros: u.timestamp.seconds * 1e6 + u.timestamp.nanoseconds / 1000 };
    });
  });
  assert.equal(all.length, written, 'the relay has every update written');
  assert.deepEqual(all.map((u) => u.seq).sort((a, b) => a - b), Array.from({ length: written }, (_, i) => i + 1));
  assert.ok(all.every((u) => ['x', 'y', 'z'].includes(u.shard)));
  assert.equal(new Set(all.map((u) => u.micros)).size, written, 'timestamps are unique');
  for (const s of ['x', 'y', 'z']) assert.ok(all.filter((u) => u.shard === s).length > written / 6, `shard ${s} used`);

  // Each view of both pages, for every value of its select, shows the latest 5 that Node
  // computes from the relay's documents.
  const newest = all.slice().sort((a, b) => b.micros - a.micros);
  for (const [field, values] of Object.entries(CHOICES)) {
    for (const value of values) {
      const expected = newest.filter((u) => u[field] === value).slice(0, 5).map((u) => u.id);
      assert.equal(expected.length, 5);
      for (const p of [v, w]) {
        await p.selectOption(`.view[data-field="${field}"] select`, value);
        await p.waitForFunction(({ field, expected }) => {
          const ids = [...document.querySelectorAll(`.view[data-field="${field}"] li`)].map((li) => li.dataset.id);
          return JSON.stringify(ids) === JSON.stringify(expected);
        }, { field, expected }, { timeout: 10000 }).catch(async () => {
          assert.deepEqual((await views(p))[field], expected, `${field} == ${value}`);
        });
      }
    }
  }

  // A malformed update, written through the modular API with nobody catching its
  // rejection, is refused by the rules, and the page shows it.
  assert.equal(await v.isVisible('#error'), false);
  await v.evaluate(() => {
    import('/pkg/firestore.js').then(async (f) => {
      const db = await f.openFirestore({ name: 'instruments', relay: `ws://${location.host}` });
      return f.addDoc(f.collection(db, 'instruments'), { shard: 'q', symbol: 'AAA', price: { currency: 'USD', micros: 1 },
        exchange: 'EXCHG1', instrumentType: 'etf', timestamp: f.Timestamp.now(), writer: 'test', seq: 1 });
    });
  });
  await v.waitForSelector('#error', { state: 'visible' });
  assert.match(await v.textContent('#error-text'), /permission-denied/);

  // The viewer shows when it is offline.
  await env.viewer.context.setOffline(true);
  await v.waitForSelector('#conn.offline');
  await env.viewer.context.setOffline(false);
  await v.waitForSelector('#conn.online', { timeout: 20000 });

  // A phone-sized viewport: no horizontal overflow, with an error showing too.
  const phone = await open(env.viewer, 'phone', { width: 375, height: 740 });
  await phone.waitForFunction(() => document.querySelectorAll('.view li').length === 15);
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `page width ${width} on a 375-wide viewport`);
  if (process.env.HEARTH_SCREENSHOTS) await screenshots(w, phone);
  await Promise.all([w.close(), v.close(), phone.close()]);
});

/** Desktop and phone screenshots while the writer runs, with the figures filled in. */
async function screenshots(w, phone) {
  const dir = join(root, 'docs/screenshots');
  mkdirSync(dir, { recursive: true });
  await w.click('#writer');
  await phone.waitForFunction(() => document.getElementById('p99').textContent !== '–', null, { timeout: 15000 });
  await sleep(3000);
  await w.mouse.move(0, 0);
  await phone.screenshot({ path: join(dir, 'instruments-phone.png') });
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `page width ${width} on a 375-wide viewport, the writer running`);
  const desk = await open(env.viewer, 'desktop');
  await desk.waitForFunction(() => document.getElementById('p99').textContent !== '–', null, { timeout: 15000 });
  await sleep(2000);
  await desk.screenshot({ path: join(dir, 'instruments-desktop.png') });
  await w.click('#writer');
  await desk.close();
}
