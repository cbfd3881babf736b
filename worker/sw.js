// The Shopping list's service worker: it keeps the app shell in a versioned cache (served
// cache-first, so the app opens with the network off) and hosts the origin's Hearth engine:
// it opens the database as soon as it starts, so it holds the leader lock and the tabs'
// openFirestore calls become followers it serves (one engine, one IndexedDB writer, one
// WebSocket). A module service worker may not use top-level await: the engine is started
// once and awaited where needed.
import init, { Hearth } from '/pkg/hearth.js';

// Bump to publish a new shell; a changed /pkg/hearth.js (imported above) updates the worker too.
const VERSION = 'shopping-v2';
const SHELL = ['./', './app.js', './style.css', './manifest.webmanifest', './icons/icon-192.png',
  './icons/icon-512.png', './icons/icon-maskable-512.png', '/www/demo-ui.js', '/pkg/hearth.js', '/pkg/hearth_bg.wasm',
  '/pkg/firestore.js']
  .map((path) => new URL(path, self.location).href);
const DATABASE = 'shopping';
const relay = new URL(self.location).searchParams.get('relay')
  ?? `${self.location.protocol === 'https:' ? 'wss' : 'ws'}://${self.location.host}`;

// The worker's own fetches do not pass through its fetch handler: it loads the WebAssembly
// module from its cache when it has it, so it starts offline too.
const wasm = caches.match(new URL('/pkg/hearth_bg.wasm', self.location).href)
  .then((cached) => cached ?? fetch('/pkg/hearth_bg.wasm'));
const engine = init({ module_or_path: wasm }).then(() => Hearth.open({ name: DATABASE, relay }));
engine.catch((e) => console.error('hearth: the service worker could not open the database', e));

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(VERSION);
    await cache.addAll(SHELL.map((url) => new Request(url, { cache: 'reload' })));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) if (name !== VERSION) await caches.delete(name);
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const { request } = event;
  if (request.method !== 'GET') return;
  // Pages of the app (whatever their query string) get the shell's page.
  const url = request.mode === 'navigate' ? SHELL[0] : request.url;
  if (!SHELL.includes(url)) return;
  event.respondWith((async () => {
    const cached = await caches.match(url, { cacheName: VERSION });
    return cached ?? fetch(request);
  })());
});

// A page asks where the engine runs: { type: 'engine' } is answered on the given port with
// { isLeader, version } once the database is open here (or { error }).
self.addEventListener('message', (event) => {
  if (event.data?.type !== 'engine') return;
  const port = event.ports[0];
  event.waitUntil(engine.then(
    (db) => port.postMessage({ isLeader: db.isLeader, version: VERSION }),
    (e) => port.postMessage({ error: `${e?.code ?? 'error'}: ${e?.message ?? e}` })));
});
