// A dedicated module worker running the Hearth engine (no `window`): the e2e test asks it to
// open a database, write, and report what its listener sees and what the listener checks of
// tracker.js found.
import init, { Hearth } from '/pkg/hearth.js';
import { install } from '/pkg-tests/e2e/tracker.js';

install(self);

let db;
self.onmessage = async (e) => {
  const { op } = e.data;
  try {
    if (op === 'open') {
      await init();
      db = await Hearth.open({ name: e.data.name, relay: e.data.relay });
      self.track(db.collection('w'), { includeMetadataChanges: true }, (s) => {
        self.postMessage({ op: 'snapshot', ids: s.docs.map((d) => d.id).sort(), pending: s.metadata.hasPendingWrites });
      });
      self.postMessage({ op: 'opened', global: typeof window });
    } else if (op === 'set') {
      await db.doc(e.data.path).set(e.data.data);
      self.postMessage({ op: 'set', path: e.data.path });
    } else if (op === 'trackers') {
      const trackers = self.trackers.map((t) => ({ what: t.what, errors: t.errors, deviations: t.deviations, snaps: t.snaps }));
      self.postMessage({ op: 'trackers', trackers });
    } else if (op === 'count') {
      const snap = await db.collection('w').get({ source: 'cache' });
      self.postMessage({ op: 'count', size: snap.size });
    }
  } catch (err) {
    self.postMessage({ op: 'error', code: err.code, message: String(err.message || err) });
  }
};
