// End-to-end test of the demos' index page (www/index.html): served as scripts/start serves
// it (www/, pkg/, worker/ from a real relay's --static-dir), it must link every demo, each
// link must answer 200 with a Hearth page, and it must fit a phone. With HEARTH_SCREENSHOTS=1
// it also writes docs/screenshots/index-desktop.png and index-phone.png.
// Run: HEARTH_RELAY_BIN=... node --test pkg-tests/e2e/demo_index.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { root, useDemos } from './harness.mjs';

/** Every demo the index page must link, in its order. */
const DEMOS = ['/www/list/', '/www/todo/', '/www/restaurants/', '/www/instruments/', '/www/counter/',
  '/worker/', '/www/bench/'];

const env = useDemos('browser');

test('the index page links every demo, and every link answers with a Hearth page', { timeout: 60000 }, async () => {
  const p = await env.browser.context.newPage();
  await p.setViewportSize({ width: 1280, height: 800 });
  const page = await p.goto(`${env.relay.http}/www/`);
  assert.equal(page.status(), 200);
  assert.equal(await p.title(), 'Hearth · Demos');
  const links = await p.$$eval('.demos li', (lis) => lis.map((li) => ({
    path: new URL(li.querySelector('a').href).pathname,
    shown: li.querySelector('.path').textContent,
    line: li.querySelector('p').textContent.trim(),
  })));
  assert.deepEqual(links.map((l) => l.path), DEMOS, 'the page links every demo, in order');
  for (const l of links) {
    assert.equal(l.shown, l.path, 'the address shown is the link\'s');
    assert.ok(l.line.length > 20, `${l.path} has a line saying what it shows`);
  }

  for (const path of DEMOS) {
    const res = await fetch(`${env.relay.http}${path}`);
    assert.equal(res.status, 200, `${path} answers`);
    assert.match(await res.text(), /<title>[^<]*Hearth/, `${path} is a Hearth demo page`);
  }

  // The link works in the browser too (relative addresses resolve to the demo).
  await p.click('a[href="./list/"]');
  await p.waitForURL(`${env.relay.http}/www/list/`);
  await p.waitForFunction(() => /in sync with the relay/.test(document.getElementById('status').textContent));
  assert.equal(new URL(await p.getAttribute('a[href="../"]', 'href'), p.url()).pathname, '/www/', 'the list links back to the index');

  // A phone-sized viewport: no horizontal overflow.
  const phone = await env.browser.context.newPage();
  await phone.setViewportSize({ width: 375, height: 700 });
  await phone.goto(`${env.relay.http}/www/`);
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `page width ${width} on a 375-wide viewport`);
  if (process.env.HEARTH_SCREENSHOTS) {
    const dir = join(root, 'docs/screenshots');
    mkdirSync(dir, { recursive: true });
    await p.goto(`${env.relay.http}/www/`);
    await p.screenshot({ path: join(dir, 'index-desktop.png'), fullPage: true });
    await phone.screenshot({ path: join(dir, 'index-phone.png'), fullPage: true });
  }
  await Promise.all([p.close(), phone.close()]);
});
