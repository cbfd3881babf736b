// Friendly Eats, the restaurant-review app of the Firestore codelabs, written against
// Firestore's modular API: restaurants filtered and sorted, ratings in a sub-collection, a
// rating added in a transaction that keeps numRatings and avgRating, live lists, a seeding
// batch. This is Firebase code as it stands: 'firebase/firestore' is mapped to Hearth's
// `hearth/firestore` by the page's import map, and the database handed to each function
// comes from the page's initialization (index.html), the only part a port changes.
import {
  average,
  collection,
  doc,
  getAggregateFromServer,
  getCountFromServer,
  getDoc,
  getDocs,
  onSnapshot,
  orderBy,
  query,
  runTransaction,
  serverTimestamp,
  updateDoc,
  where,
  writeBatch,
} from "firebase/firestore";

/** The restaurant list's query: any of the filters, then the chosen sort. */
export function applyQueryFilters(q, { category, city, price, sort }) {
  if (category) {
    q = query(q, where("category", "==", category));
  }
  if (city) {
    q = query(q, where("city", "==", city));
  }
  if (price) {
    q = query(q, where("price", "==", price.length));
  }
  if (sort === "Rating" || !sort) {
    q = query(q, orderBy("avgRating", "desc"));
  } else if (sort === "Review") {
    q = query(q, orderBy("numRatings", "desc"));
  }
  return q;
}

function restaurantFromDoc(docSnap) {
  const data = docSnap.data();
  return {
    id: docSnap.id,
    name: data.name,
    category: data.category,
    city: data.city,
    price: data.price,
    numRatings: data.numRatings,
    avgRating: data.avgRating,
    photo: data.photo ?? null,
  };
}

export async function getRestaurants(db, filters = {}) {
  const q = applyQueryFilters(collection(db, "restaurants"), filters);
  const results = await getDocs(q);
  return results.docs.map(restaurantFromDoc);
}

export function getRestaurantsSnapshot(db, cb, filters = {}) {
  if (typeof cb !== "function") {
    console.log("Error: The callback parameter is not a function");
    return;
  }
  const q = applyQueryFilters(collection(db, "restaurants"), filters);
  return onSnapshot(q, (querySnapshot) => {
    cb(querySnapshot.docs.map(restaurantFromDoc));
  });
}

/** The list view: rows patched from docChanges(), as a UI moves, inserts and removes its
 *  elements, with a pending marker while a write of this client is unacknowledged. */
export function watchRestaurantRows(db, filters, render, onError) {
  const rows = [];
  const q = applyQueryFilters(collection(db, "restaurants"), filters);
  return onSnapshot(q, { includeMetadataChanges: true }, {
    next: (snapshot) => {
      snapshot.docChanges().forEach((change) => {
        if (change.oldIndex !== -1) {
          rows.splice(change.oldIndex, 1);
        }
        if (change.newIndex !== -1) {
          rows.splice(change.newIndex, 0, restaurantFromDoc(change.doc));
        }
      });
      render(rows, snapshot);
    },
    error: onError,
  });
}

export async function getRestaurantById(db, restaurantId) {
  if (!restaurantId) {
    console.log("Error: Invalid ID received: ", restaurantId);
    return;
  }
  const docRef = doc(db, "restaurants", restaurantId);
  const docSnap = await getDoc(docRef);
  return docSnap.exists() ? restaurantFromDoc(docSnap) : null;
}

export function getReviewsSnapshotByRestaurantId(db, restaurantId, cb) {
  const q = query(
    collection(db, "restaurants", restaurantId, "ratings"),
    orderBy("timestamp", "desc")
  );
  return onSnapshot(q, (querySnapshot) => {
    cb(
      querySnapshot.docs.map((d) => ({
        id: d.id,
        rating: d.data().rating,
        text: d.data().text,
        userId: d.data().userId,
        timestamp: d.data().timestamp?.toMillis() ?? null,
      }))
    );
  });
}

const updateWithRating = async (transaction, docRef, newRatingDocument, review) => {
  const restaurant = await transaction.get(docRef);
  if (!restaurant.exists()) {
    throw new Error("Restaurant does not exist.");
  }
  const data = restaurant.data();
  const newNumRatings = data?.numRatings ? data.numRatings + 1 : 1;
  const newSumRating = (data?.sumRating || 0) + Number(review.rating);
  const newAverage = newSumRating / newNumRatings;

  transaction.update(docRef, {
    numRatings: newNumRatings,
    sumRating: newSumRating,
    avgRating: newAverage,
  });
  transaction.set(newRatingDocument, {
    ...review,
    timestamp: serverTimestamp(),
  });
};

export async function addReviewToRestaurant(db, restaurantId, review) {
  if (!restaurantId) {
    throw new Error("No restaurant ID has been provided.");
  }
  if (!review) {
    throw new Error("A valid review has not been provided.");
  }
  const docRef = doc(collection(db, "restaurants"), restaurantId);
  const newRatingDocument = doc(collection(db, `restaurants/${restaurantId}/ratings`));
  await runTransaction(db, (transaction) =>
    updateWithRating(transaction, docRef, newRatingDocument, review)
  );
  return newRatingDocument.id;
}

export async function updateRestaurantImageReference(db, restaurantId, publicImageUrl) {
  const restaurantRef = doc(collection(db, "restaurants"), restaurantId);
  if (restaurantRef) {
    await updateDoc(restaurantRef, { photo: publicImageUrl });
  }
}

/** The counts shown on a restaurant's page, computed by the server. */
export async function getRatingStats(db, restaurantId) {
  const ratings = collection(db, "restaurants", restaurantId, "ratings");
  const [counted, averaged] = await Promise.all([
    getCountFromServer(ratings),
    getAggregateFromServer(ratings, { avgRating: average("rating") }),
  ]);
  return { count: counted.data().count, avgRating: averaged.data().avgRating };
}

/** Seeds restaurants and their ratings in one batch; resolves to the new restaurants' ids. */
export async function addFakeRestaurantsAndReviews(db, restaurants) {
  const batch = writeBatch(db);
  const ids = [];
  for (const { ratings, ...restaurant } of restaurants) {
    const restaurantRef = doc(collection(db, "restaurants"));
    const sumRating = ratings.reduce((sum, r) => sum + r.rating, 0);
    batch.set(restaurantRef, {
      ...restaurant,
      numRatings: ratings.length,
      sumRating,
      avgRating: ratings.length ? sumRating / ratings.length : 0,
      timestamp: serverTimestamp(),
    });
    for (const rating of ratings) {
      batch.set(doc(collection(restaurantRef, "ratings")), {
        ...rating,
        timestamp: serverTimestamp(),
      });
    }
    ids.push(restaurantRef.id);
  }
  await batch.commit();
  return ids;
}
