// Hearth's distributed counter demo (seed 002): a like counter kept as a counter document
// with N shard documents in a sub-collection. A press increments a random shard by 1; the
// total is the sum of the shards, listened to live. Written against the Firestore modular API.
import { openFirestore, doc, collection, onSnapshot, updateDoc, increment, runTransaction }
  from '/pkg/firestore.js';
import { connectionBadge, errorBar } from '../demo-ui.js';

const NUM_SHARDS = 10;
const $ = (id) => document.getElementById(id);
const relay = new URLSearchParams(location.search).get('relay')
  ?? `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
const showError = errorBar({ 'permission-denied': 'The rules refused this: a shard only goes up by 1.' }, { uncaught: true });
const showStatus = connectionBadge();
let pressed = 0, saved = 0;

function showMine() {
  const waiting = pressed - saved;
  $('mine').textContent = pressed === 0 ? 'You have not pressed yet.'
    : `You pressed ${pressed.toLocaleString('en')} times${waiting ? `, ${waiting.toLocaleString('en')} not yet saved` : ', all saved'}.`;
}

// The seed's createCounter, in a transaction so that two pages opening a new counter at once
// create it once: the counter document and its shards at count 0.
function createCounter(db, ref, numShards) {
  return runTransaction(db, async (tx) => {
    if ((await tx.get(ref)).exists()) return;
    tx.set(ref, { num_shards: numShards });
    for (let i = 0; i < numShards; i++) tx.set(doc(ref, 'shards', String(i)), { count: 0 });
  });
}

// The seed's incrementCounter: +1 on a random shard. `by` is for the rules' demonstration.
function incrementCounter(ref, numShards, by = 1) {
  const shard = doc(ref, 'shards', String(Math.floor(Math.random() * numShards)));
  return updateDoc(shard, 'count', increment(by));
}

function press(ref, numShards) {
  pressed++;
  showMine();
  incrementCounter(ref, numShards).then(() => { saved++; showMine(); }, (e) => {
    pressed--;
    showMine();
    showError(e);
  });
}

function showShards(snap, numShards) {
  const total = snap.docs.reduce((sum, d) => sum + d.data().count, 0);
  $('total').textContent = total.toLocaleString('en');
  const max = Math.max(1, ...snap.docs.map((d) => d.data().count));
  $('shards').replaceChildren(...snap.docs.map((d) => {
    const li = document.createElement('li');
    li.className = d.metadata.hasPendingWrites ? 'pending' : '';
    li.dataset.id = d.id;
    li.style.setProperty('--fill', `${(100 * d.data().count) / max}%`);
    li.title = `shard ${d.id}: ${d.data().count}`;
    li.textContent = d.data().count.toLocaleString('en');
    return li;
  }));
  $('num-shards').textContent = numShards;
  $('pending').hidden = !snap.metadata.hasPendingWrites;
  $('pending').textContent = pressed > saved ? `${(pressed - saved).toLocaleString('en')} not yet saved` : 'Saving…';
}

async function start() {
  const db = await openFirestore({ name: 'counter', relay });
  const counter = doc(db, 'counters', 'likes');
  let numShards = 0;
  onSnapshot(counter, { includeMetadataChanges: true }, (snap) => {
    showStatus(snap.metadata.fromCache);
    if (!snap.exists()) {
      if (!snap.metadata.fromCache) createCounter(db, counter, NUM_SHARDS).catch(showError);
      return;
    }
    if (numShards) return;
    numShards = snap.data().num_shards;
    onSnapshot(collection(counter, 'shards'), { includeMetadataChanges: true }, (s) => {
      showStatus(s.metadata.fromCache);
      showShards(s, numShards);
    }, showError);
    for (const id of ['like', 'like100', 'cheat']) $(id).disabled = false;
  }, showError);
  $('like').onclick = () => press(counter, numShards);
  $('like100').onclick = () => { for (let i = 0; i < 100; i++) press(counter, numShards); };
  $('cheat').onclick = () => incrementCounter(counter, numShards, 2).catch(showError);
  window.hearthReady = true;
}
showStatus();
start().catch(showError);
