// Hearth's offline Shopping list, the page: it starts the service worker (sw.js), which opens
// the database first and so hosts the engine, then opens the same database itself with the
// Firestore modular API, as a follower served by that engine, and shows the list live.
import { openFirestore, collection, query, orderBy, onSnapshot, addDoc, updateDoc, deleteDoc,
  writeBatch, serverTimestamp } from '/pkg/firestore.js';
import { connectionBadge, errorBar } from '/www/demo-ui.js';

const $ = (id) => document.getElementById(id);
const relayParam = new URLSearchParams(location.search).get('relay');
const relay = relayParam ?? `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
const showError = errorBar();
const showStatus = connectionBadge();

/** Asks the service worker where the engine runs: its { isLeader, version }, or null. */
function askWorker(worker, ms) {
  if (!worker) return Promise.resolve(null);
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = (e) => resolve(e.data);
    worker.postMessage({ type: 'engine' }, [channel.port2]);
    setTimeout(() => resolve(null), ms);
  });
}

/** Registers the service worker and waits until it has opened the database. */
async function startWorker() {
  if (!('serviceWorker' in navigator)) throw new Error('this browser has no service workers: the engine runs in the tab');
  const script = relayParam ? `./sw.js?relay=${encodeURIComponent(relayParam)}` : './sw.js';
  await navigator.serviceWorker.register(script, { type: 'module', scope: './' });
  const { active } = await navigator.serviceWorker.ready;
  const answer = await askWorker(active, 20000);
  if (answer?.error) throw new Error(`the service worker could not open the database (${answer.error})`);
}

/** Shows where the engine runs (this tab, the service worker, another tab) and the shell. */
async function showEngine(db) {
  const reg = await navigator.serviceWorker?.getRegistration();
  const answer = db.hearth.isLeader ? null : await askWorker(reg?.active, 3000);
  const [where, text] = db.hearth.isLeader ? ['tab', 'in this tab (the service worker is not running it now)']
    : answer?.isLeader ? ['worker', 'in the service worker, shared by every tab']
      : ['other-tab', 'in another tab of this app, shared by every tab'];
  $('engine').textContent = text;
  $('engine').dataset.where = where;
  const cached = answer?.version ?? (await globalThis.caches?.keys().catch(() => []))?.find((k) => k.startsWith('shopping-'));
  $('shell').textContent = navigator.serviceWorker?.controller && cached
    ? `cached by the service worker (${cached}): it opens with the network off`
    : 'not cached yet: reload once online to make it work offline';
}

function itemRow(item) {
  const { text, bought } = item.data();
  const li = document.createElement('li');
  li.className = `item${bought ? ' bought' : ''}${item.metadata.hasPendingWrites ? ' pending' : ''}`;
  const box = Object.assign(document.createElement('input'), { type: 'checkbox', checked: bought, title: 'Bought' });
  box.onchange = () => updateDoc(item.ref, { bought: box.checked }).catch(showError);
  const label = Object.assign(document.createElement('span'), { className: 'text', textContent: text });
  const del = Object.assign(document.createElement('button'), { className: 'delete', textContent: '×', title: 'Remove' });
  del.onclick = () => deleteDoc(item.ref).catch(showError);
  li.append(box, label, del);
  return li;
}

async function start() {
  await startWorker().catch(showError);
  const db = await openFirestore({ name: 'shopping', relay });
  const items = collection(db, 'shopping');
  let bought = [];
  $('add').onsubmit = (e) => {
    e.preventDefault();
    addDoc(items, { text: $('text').value.trim(), bought: false, createdAt: serverTimestamp() }).catch(showError);
    $('text').value = '';
  };
  $('clear').onclick = () => {
    const batch = writeBatch(db);
    for (const item of bought) batch.delete(item.ref);
    batch.commit().catch(showError);
  };
  onSnapshot(query(items, orderBy('createdAt')), { includeMetadataChanges: true }, (snap) => {
    showStatus(snap.metadata.fromCache);
    const pending = snap.docs.filter((d) => d.metadata.hasPendingWrites).length;
    $('pending').hidden = !snap.metadata.hasPendingWrites;
    $('pending').textContent = pending ? `${pending} not yet saved` : 'Saving…';
    bought = snap.docs.filter((d) => d.data().bought);
    $('list').replaceChildren(...snap.docs.filter((d) => !d.data().bought).map(itemRow), ...bought.map(itemRow));
    $('empty').hidden = snap.size > 0;
    $('clear-row').hidden = bought.length === 0;
  }, showError);
  await showEngine(db);
  setInterval(() => showEngine(db).catch(showError), 2000);
  window.hearthReady = true;
}

showStatus();
start().catch(showError);
