// A dedicated module worker running the Hearth engine (no `window`): the e2e test asks it to
// open a database, write, and report what its listener sees.
import init, { Hearth } from '/pkg/hearth.js';

let db;
self.onmessage = async (e) => {
  const { op } = e.data;
  try {
    if (op === 'open') {
      await init();
      db = await Hearth.open({ name: e.data.name, relay: e.data.relay });
      db.collection('w').onSnapshot({ includeMetadataChanges: true }, (s) => {
        self.postMessage({ op: 'snapshot', ids: s.docs.map((d) => d.id).sort(), pending: s.metadata.hasPendingWrites });
      });
      self.postMessage({ op: 'opened', global: typeof window });
    } else if (op === 'set') {
      await db.doc(e.data.path).set(e.data.data);
      self.postMessage({ op: 'set', path: e.data.path });
    } else if (op === 'count') {
      const snap = await db.collection('w').get({ source: 'cache' });
      self.postMessage({ op: 'count', size: snap.size });
    }
  } catch (err) {
    self.postMessage({ op: 'error', code: err.code, message: String(err.message || err) });
  }
};
