// A SharedWorker that hosts the origin's Hearth engine for the e2e tests: it opens the
// database its first port asks for (with that relay) and, holding the leader lock, serves
// every tab that opens the same database. Each port's message { name, relay } is answered
// with { isLeader } once the database is open (or { error }).
import init, { Hearth } from '/pkg/hearth.js';

const ready = init();
const open = new Map();

self.onconnect = (event) => {
  const port = event.ports[0];
  port.onmessage = async ({ data }) => {
    try {
      await ready;
      if (!open.has(data.name)) open.set(data.name, Hearth.open({ name: data.name, relay: data.relay }));
      const db = await open.get(data.name);
      port.postMessage({ isLeader: db.isLeader });
    } catch (e) {
      port.postMessage({ error: `${e.code}: ${e.message}` });
    }
  };
};
