// A module service worker running the Hearth engine: it serves /worker/api/items from the
// local database (IndexedDB), online or not. Top-level await is not allowed here, so the
// engine is initialised once and awaited in the handlers.
import init, { Hearth } from '/pkg/hearth.js';

const ready = init().then(() => Hearth.open({ name: 'demo', relay: `ws://${self.location.host}` }));

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));
self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (url.pathname !== '/worker/api/items') return;
  event.respondWith((async () => {
    const db = await ready;
    const snap = await db.collection('items').orderBy('createdAt', 'desc').limit(50).get({ source: 'cache' });
    const body = snap.docs.map((d) => ({ id: d.id, text: d.data().text, pending: d.metadata.hasPendingWrites }));
    return new Response(JSON.stringify(body), { headers: { 'content-type': 'application/json' } });
  })());
});
