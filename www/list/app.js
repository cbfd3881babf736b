// The demo: one collection listened to live, with latency compensation and offline writes.
import init, { Hearth, FieldValue } from '/pkg/hearth.js';

await init();
const relay = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
const db = await Hearth.open({ name: 'demo', relay });
const items = db.collection('items');
const status = document.getElementById('status');
const list = document.getElementById('items');

items.orderBy('createdAt', 'desc').limit(50).onSnapshot({ includeMetadataChanges: true }, (snap) => {
  status.textContent = `${snap.size} items · ${snap.metadata.fromCache ? 'from the local cache' : 'in sync with the relay'}`;
  list.replaceChildren(...snap.docs.map((doc) => {
    const li = document.createElement('li');
    li.textContent = doc.data().text;
    if (doc.metadata.hasPendingWrites) li.className = 'pending';
    const del = document.createElement('button');
    del.textContent = '×';
    del.onclick = () => doc.ref.delete();
    li.append(' ', del);
    return li;
  }));
}, (err) => { status.textContent = `error: ${err.code}: ${err.message}`; });

document.getElementById('add').onsubmit = (e) => {
  e.preventDefault();
  const input = document.getElementById('text');
  items.add({ text: input.value, createdAt: FieldValue.serverTimestamp() });
  input.value = '';
};

document.getElementById('offline').onchange = (e) => (e.target.checked ? db.disableNetwork() : db.enableNetwork());
