// Hearth's Restaurants demo: the Firestore paper's running example on the Firestore modular
// API. A live list of restaurants with filters and sorts, each restaurant's ratings live,
// a rating added in a transaction that keeps the restaurant's numRatings and avgRating,
// sample restaurants to start from, and a development-only sign-in.
import { openFirestore, collection, doc, query, where, orderBy, limit, documentId, onSnapshot,
  getDocs, writeBatch, runTransaction, serverTimestamp } from '/pkg/firestore.js';
import { connectionBadge, errorBar } from '../demo-ui.js';
import { devToken, uidOf } from '../dev-signin.js';

const $ = (id) => document.getElementById(id);
const el = (tag, className, text) => Object.assign(document.createElement(tag), { className, textContent: text ?? '' });
const relay = new URLSearchParams(location.search).get('relay')
  ?? `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;

// The sample restaurants: fixed ids, so seeding twice adds nothing.
const CITIES = ['Austin', 'Boston', 'Denver'];
const CATEGORIES = ['Bakery', 'BBQ', 'Mexican', 'Pizza', 'Sushi', 'Vegetarian'];
const SAMPLES = [
  ['ember-and-oak', 'Ember & Oak', 'BBQ', 'Austin', 3], ['smoke-shack', 'Smoke Shack', 'BBQ', 'Denver', 1],
  ['slice-of-naples', 'Slice of Naples', 'Pizza', 'Austin', 2], ['forno-rosso', 'Forno Rosso', 'Pizza', 'Boston', 3],
  ['little-tokyo-bar', 'Little Tokyo Bar', 'Sushi', 'Boston', 4], ['koi-counter', 'Koi Counter', 'Sushi', 'Austin', 3],
  ['green-table', 'Green Table', 'Vegetarian', 'Denver', 2], ['sprout-house', 'Sprout House', 'Vegetarian', 'Boston', 1],
  ['taco-luna', 'Taco Luna', 'Mexican', 'Denver', 1], ['casa-azul', 'Casa Azul', 'Mexican', 'Austin', 2],
  ['morning-crust', 'Morning Crust', 'Bakery', 'Boston', 1], ['golden-crumb', 'Golden Crumb', 'Bakery', 'Denver', 2],
];
const SORTS = { rating: ['avgRating', 'desc'], ratings: ['numRatings', 'desc'], price: ['price', 'asc'] };

const WHY = {
  'permission-denied': 'The security rules refused this.',
  unavailable: 'Ratings need a connection to the relay: try again once online.',
  'failed-precondition': 'The relay cannot run this query.',
};
const showError = errorBar(WHY, { uncaught: true });
const showStatus = connectionBadge();


const stars = (n) => '★'.repeat(Math.round(n)) + '☆'.repeat(5 - Math.round(n));
const price = (n) => '$'.repeat(n);

/** Replays a snapshot's changes onto the list `ul` (an element per document, in order). */
function replay(ul, snap, render) {
  for (const c of snap.docChanges({ includeMetadataChanges: true })) {
    if (c.type === 'removed') { ul.children[c.oldIndex].remove(); continue; }
    const li = c.type === 'added' ? el('li') : ul.children[c.oldIndex];
    if (c.type === 'modified') li.remove();
    li.dataset.id = c.doc.id;
    li.classList.toggle('pending', c.doc.metadata.hasPendingWrites);
    render(li, c.doc.data({ serverTimestamps: 'estimate' }));
    ul.insertBefore(li, ul.children[c.newIndex] ?? null);
  }
}

function restaurantRow(li, r) {
  li.className = `restaurant${li.classList.contains('pending') ? ' pending' : ''}${li.dataset.id === selected ? ' selected' : ''}`;
  const a = el('a', 'open');
  a.href = `#${li.dataset.id}`;
  const main = el('span', 'main');
  main.append(el('span', 'name', r.name), el('span', 'meta', `${r.category} · ${r.city} · ${price(r.price)}`));
  const score = el('span', 'score');
  score.append(el('span', 'stars', stars(r.avgRating)),
    el('span', 'avg', r.numRatings ? r.avgRating.toFixed(1) : '–'),
    el('span', 'count', `${r.numRatings} rating${r.numRatings === 1 ? '' : 's'}`));
  a.append(el('span', 'avatar', r.name[0]), main, score);
  li.replaceChildren(a);
}

function ratingRow(li, r) {
  li.className = `rating${r.userId === uid ? ' mine' : ''}`;
  const head = el('div', 'head');
  head.append(el('span', 'stars', stars(r.rating)), el('span', 'by', r.userId === uid ? 'you' : r.userId),
    el('time', 'when', r.time?.toDate().toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' }) ?? ''));
  li.replaceChildren(head, el('p', 'text', r.text));
}

let db, uid, selected = null, stopList = () => {}, stopDetail = () => {};

function listen() {
  stopList();
  const { category, city, price: p, sort } = Object.fromEntries(new FormData($('filters')));
  const constraints = [];
  if (category) constraints.push(where('category', '==', category));
  if (city) constraints.push(where('city', '==', city));
  if (p) constraints.push(where('price', '==', Number(p)));
  if (!(sort === 'price' && p)) constraints.push(orderBy(...SORTS[sort]));
  $('list').replaceChildren();
  $('list').setAttribute('aria-busy', 'true');
  stopList = onSnapshot(query(collection(db, 'restaurants'), ...constraints, limit(50)), { includeMetadataChanges: true }, (snap) => {
    showStatus(snap.metadata.fromCache);
    $('pending').hidden = !snap.metadata.hasPendingWrites;
    replay($('list'), snap, restaurantRow);
    $('list').removeAttribute('aria-busy');
    $('empty').hidden = snap.size > 0;
  }, showError);
}

function open(id) {
  stopDetail();
  selected = id || null;
  document.body.classList.toggle('detail-open', !!selected);
  for (const li of $('list').children) li.classList.toggle('selected', li.dataset.id === selected);
  $('detail').hidden = !selected;
  if (!selected) return;
  $('ratings').replaceChildren();
  const ref = doc(db, 'restaurants', selected);
  const stops = [onSnapshot(ref, (d) => {
    const r = d.data();
    if (!r) { $('d-name').textContent = 'No such restaurant'; return; }
    $('d-name').textContent = r.name;
    $('d-meta').textContent = `${r.category} · ${r.city} · ${price(r.price)}`;
    $('d-avg').textContent = r.numRatings ? r.avgRating.toFixed(2) : '–';
    $('d-stars').textContent = stars(r.avgRating);
    $('d-count').textContent = `${r.numRatings} rating${r.numRatings === 1 ? '' : 's'}`;
  }, showError),
  onSnapshot(query(collection(ref, 'ratings'), orderBy('time', 'desc')), { includeMetadataChanges: true }, (snap) => {
    replay($('ratings'), snap, ratingRow);
    $('no-ratings').hidden = snap.size > 0;
  }, showError)];
  stopDetail = () => stops.forEach((stop) => stop());
}

/** Adds a rating and updates the restaurant's numRatings and avgRating, in one transaction. */
async function addRating(restaurantId, rating, text) {
  const ref = doc(db, 'restaurants', restaurantId);
  const ratingRef = doc(collection(ref, 'ratings'));
  await runTransaction(db, async (tx) => {
    const r = (await tx.get(ref)).data();
    const numRatings = r.numRatings + 1;
    tx.update(ref, { numRatings, avgRating: (r.avgRating * r.numRatings + rating) / numRatings });
    tx.set(ratingRef, { userId: uid, rating, text, time: serverTimestamp() });
  });
}

/** Creates the sample restaurants that do not exist yet, in one batch. */
async function seed() {
  const have = await getDocs(query(collection(db, 'restaurants'), where(documentId(), 'in', SAMPLES.map((s) => s[0]))));
  const batch = writeBatch(db);
  const ids = new Set(have.docs.map((d) => d.id));
  for (const [id, name, category, city, p] of SAMPLES.filter((s) => !ids.has(s[0]))) {
    batch.set(doc(db, 'restaurants', id), { name, category, city, price: p, numRatings: 0, avgRating: 0 });
  }
  await batch.commit();
}

async function start(name) {
  uid = name;
  $('signin').hidden = true;
  $('app').hidden = false;
  $('who').textContent = uid;
  db = await openFirestore({ name: 'restaurants', relay, token: () => devToken(uid) });
  window.hearthDb = db; // for trying queries from the console
  const options = (values, label) => [new Option(label, ''), ...values.map((v) => new Option(v, v))];
  $('category').replaceChildren(...options(CATEGORIES, 'Any category'));
  $('city').replaceChildren(...options(CITIES, 'Any city'));
  $('filters').onchange = listen;
  $('seed').onclick = () => seed().catch(showError);
  $('close').onclick = () => { location.hash = ''; };
  onhashchange = () => open(decodeURIComponent(location.hash.slice(1)));
  $('rate').onsubmit = (e) => {
    e.preventDefault();
    const button = $('rate').querySelector('button');
    button.disabled = true;
    addRating(selected, Number($('stars').value), $('comment').value.trim())
      .then(() => { $('comment').value = ''; }, showError)
      .finally(() => { button.disabled = false; });
  };
  listen();
  onhashchange();
  window.hearthReady = true;
}

$('signout').onclick = () => { localStorage.removeItem('restaurants-user'); location.reload(); };
$('signin').onsubmit = (e) => {
  e.preventDefault();
  const name = uidOf($('name').value);
  if (!name) return showError({ code: 'invalid-argument', message: 'a name needs a letter or a digit' });
  localStorage.setItem('restaurants-user', name);
  start(name).catch(showError);
};
showStatus();
const saved = localStorage.getItem('restaurants-user');
if (saved) start(saved).catch(showError);
else $('signin').hidden = false;
