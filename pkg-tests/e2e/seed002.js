// Seed 002's web code (distributed counters). The seed's text lost its line breaks; this is
// the same code with them restored, otherwise unchanged. `db` and `firebase` are the
// initialisation: `firebase.firestore.FieldValue` is Hearth's FieldValue.

export function counters(db, firebase) {
  function createCounter(ref, num_shards) {
    var batch = db.batch();

    // Initialize the counter document
    batch.set(ref, { num_shards: num_shards });

    // Initialize each shard with count=0
    for (let i = 0; i < num_shards; i++) {
      const shardRef = ref.collection('shards').doc(i.toString());
      batch.set(shardRef, { count: 0 });
    }

    // Commit the write batch
    return batch.commit();
  }

  function incrementCounter(ref, num_shards) {
    // Select a shard of the counter at random
    const shard_id = Math.floor(Math.random() * num_shards).toString();
    const shard_ref = ref.collection('shards').doc(shard_id);

    // Update count
    return shard_ref.update("count", firebase.firestore.FieldValue.increment(1));
  }

  function getCount(ref) {
    // Sum the count of each shard in the subcollection
    return ref.collection('shards').get().then((snapshot) => {
      let total_count = 0;
      snapshot.forEach((doc) => {
        total_count += doc.data().count;
      });
      return total_count;
    });
  }

  return { createCounter, incrementCounter, getCount };
}

/** Runs the seed's counter in `db` (Hearth's `FieldValue` as firebase's): creates counter
 *  `counters/c1` with 5 shards, increments it `n` times concurrently, returns its count. */
export async function countTo(db, FieldValue, n) {
  const { createCounter, incrementCounter, getCount } = counters(db, { firestore: { FieldValue } });
  const ref = db.collection('counters').doc('c1');
  await createCounter(ref, 5);
  await Promise.all(Array.from({ length: n }, () => incrementCounter(ref, 5)));
  return getCount(ref);
}
