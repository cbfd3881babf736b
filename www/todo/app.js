// Hearth's Todo List demo: one shared list of items (add, mark done, delete) listened to
// live, written against the Firestore modular API, with a development-only sign-in.
import { openFirestore, collection, query, orderBy, onSnapshot, addDoc, updateDoc, deleteDoc,
  serverTimestamp } from '/pkg/firestore.js';
import { connectionBadge, errorBar } from '../demo-ui.js';
import { devToken, uidOf } from '../dev-signin.js';

const $ = (id) => document.getElementById(id);
const relay = new URLSearchParams(location.search).get('relay')
  ?? `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
const showError = errorBar({ 'permission-denied': 'Only the creator of an item may change or delete it.' });
const showStatus = connectionBadge();


function itemRow(item, uid) {
  const { text, done, creator } = item.data();
  const li = document.createElement('li');
  li.className = `item${done ? ' done' : ''}${item.metadata.hasPendingWrites ? ' pending' : ''}`;
  li.dataset.id = item.id;
  const box = Object.assign(document.createElement('input'), { type: 'checkbox', checked: done, title: 'Done' });
  box.onchange = () => updateDoc(item.ref, { done: box.checked }).catch(showError);
  const label = Object.assign(document.createElement('span'), { className: 'text', textContent: text });
  const by = Object.assign(document.createElement('span'), { className: 'meta', textContent: creator === uid ? 'you' : creator });
  const del = Object.assign(document.createElement('button'), { className: 'delete', textContent: '×', title: 'Delete' });
  del.onclick = () => deleteDoc(item.ref).catch(showError);
  li.append(box, label, by, del);
  return li;
}

async function start(uid) {
  $('signin').hidden = true;
  $('app').hidden = false;
  $('who').textContent = uid;
  const db = await openFirestore({ name: 'todo', relay, token: () => devToken(uid) });
  const todos = collection(db, 'todos');
  $('add').onsubmit = (e) => {
    e.preventDefault();
    addDoc(todos, { creator: uid, text: $('text').value.trim(), done: false, created: serverTimestamp() })
      .catch(showError);
    $('text').value = '';
  };
  onSnapshot(query(todos, orderBy('created')), { includeMetadataChanges: true }, (snap) => {
    showStatus(snap.metadata.fromCache);
    const pending = snap.docs.filter((d) => d.metadata.hasPendingWrites).length;
    $('pending').hidden = !snap.metadata.hasPendingWrites;
    $('pending').textContent = pending ? `${pending} not yet saved` : 'Saving…';
    $('pending').className = 'badge saving';
    $('list').replaceChildren(...snap.docs.map((d) => itemRow(d, uid)));
    $('empty').hidden = snap.size > 0;
  }, showError);
  window.hearthReady = true;
}

$('signout').onclick = () => { localStorage.removeItem('todo-user'); location.reload(); };
$('signin').onsubmit = (e) => {
  e.preventDefault();
  const uid = uidOf($('name').value);
  if (!uid) return showError({ code: 'invalid-argument', message: 'a name needs a letter or a digit' });
  localStorage.setItem('todo-user', uid);
  start(uid).catch(showError);
};
showStatus();
const saved = localStorage.getItem('todo-user');
if (saved) start(saved).catch(showError);
else $('signin').hidden = false;
