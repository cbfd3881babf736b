//! A write transaction of the PostgreSQL backend. Its writes are buffered (its reads see
//! them) and sent at the end, every statement and the `COMMIT` in one round trip; a group
//! commit's first round trip (`BEGIN`, the head locks, and the reads ahead of the batches'
//! documents and idempotency records) is one too. So a round costs two round trips and the
//! server's commit, whatever its batches hold.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::pg_conn::PgConn;

use super::postgres::{head_of, sql_err, table, Reader, TABS};
use super::txn::{Head, ReadTxn, Rows, Tab, WriteTxn};
use super::StoreError;

/// The longest key stored: a PostgreSQL B-tree entry must fit in a third of a page (2,704
/// bytes with its header), whatever its compression.
pub const MAX_KEY_BYTES: usize = 2400;

/// A write transaction's buffered writes (`None`: a deletion) and heads, sent at commit.
#[derive(Default)]
struct Pending {
    tables: [BTreeMap<Vec<u8>, Option<Vec<u8>>>; 4],
    meta: BTreeMap<String, Option<Vec<u8>>>,
    heads: BTreeMap<String, (u64, i64)>,
    /// Catalog generations set ([`WriteTxn::set_catalog_generation`]).
    catalogs: BTreeMap<String, u64>,
}

/// A write transaction in progress.
pub(super) struct PgWrite {
    reader: Reader,
    pending: Pending,
    /// Rows read ahead, valid for the transaction: they are read after the heads of their
    /// databases are locked.
    cache: Ahead,
    /// The first failure to serialize: the transaction is rolled back and run again.
    pub(super) retry: Option<String>,
}

type Job = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// The statements that send `rows` of table `t` (prepared on `conn`, not yet run).
async fn table_jobs(
    conn: &Arc<PgConn>,
    t: Tab,
    rows: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    jobs: &mut Vec<Job>,
) -> Result<(), tokio_postgres::Error> {
    let (mut keys, mut values, mut gone) = (Vec::new(), Vec::new(), Vec::new());
    for (k, v) in rows {
        match v {
            Some(v) => {
                keys.push(k);
                values.push(v);
            }
            None => gone.push(k),
        }
    }
    let name = table(t);
    if !gone.is_empty() {
        let stmt = conn
            .prepare_cached(&format!("DELETE FROM {name} WHERE key = ANY($1)"))
            .await?;
        let c = conn.clone();
        jobs.push(Box::pin(async move {
            c.execute(&stmt, &[&gone]).await.map(drop)
        }));
    }
    if !keys.is_empty() {
        let stmt = conn
            .prepare_cached(&format!(
                "INSERT INTO {name} (key, value) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
            ))
            .await?;
        let c = conn.clone();
        jobs.push(Box::pin(async move {
            c.execute(&stmt, &[&keys, &values]).await.map(drop)
        }));
    }
    Ok(())
}

/// Sends every buffered write (the heads last), then `COMMIT` when `commit`, pipelined:
/// each request goes out when its future is first polled, in order.
async fn send(
    conn: Arc<PgConn>,
    pending: Pending,
    commit: bool,
) -> Result<(), tokio_postgres::Error> {
    let Pending {
        tables,
        meta,
        heads,
        catalogs,
    } = pending;
    let mut jobs: Vec<Job> = Vec::new();
    for (t, rows) in TABS.into_iter().zip(tables) {
        table_jobs(&conn, t, rows, &mut jobs).await?;
    }
    // Every statement is prepared before any is sent: a job that had to prepare its own
    // would send its execution only after that round trip, behind the `COMMIT`.
    if !meta.is_empty() {
        let upsert = conn
            .prepare_cached(
                "INSERT INTO hearth_meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            )
            .await?;
        let delete = conn
            .prepare_cached("DELETE FROM hearth_meta WHERE key = $1")
            .await?;
        for (k, v) in meta {
            let c = conn.clone();
            let (upsert, delete) = (upsert.clone(), delete.clone());
            jobs.push(Box::pin(async move {
                match v {
                    Some(v) => c.execute(&upsert, &[&k, &v]).await.map(drop),
                    None => c.execute(&delete, &[&k]).await.map(drop),
                }
            }));
        }
    }
    if !catalogs.is_empty() {
        let dbs: Vec<String> = catalogs.keys().cloned().collect();
        let generations: Vec<i64> = catalogs.values().map(|g| *g as i64).collect();
        let stmt = conn
            .prepare_cached(
                "UPDATE hearth_heads SET catalog = g FROM unnest($1::text[], $2::bigint[]) \
                 AS c(d, g) WHERE db = d",
            )
            .await?;
        let c = conn.clone();
        jobs.push(Box::pin(async move {
            c.execute(&stmt, &[&dbs, &generations]).await.map(drop)
        }));
    }
    if !heads.is_empty() {
        let dbs: Vec<String> = heads.keys().cloned().collect();
        let versions: Vec<i64> = heads.values().map(|(v, _)| *v as i64).collect();
        let micros: Vec<i64> = heads.values().map(|(_, m)| *m).collect();
        // A head never moves back: a relay registering a database another relay just
        // created and wrote leaves its head as it is.
        let stmt = conn
            .prepare_cached(
                "INSERT INTO hearth_heads (db, version, commit_micros) \
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) \
                 ON CONFLICT (db) DO UPDATE SET version = EXCLUDED.version, \
                 commit_micros = EXCLUDED.commit_micros \
                 WHERE hearth_heads.version <= EXCLUDED.version",
            )
            .await?;
        let c = conn.clone();
        jobs.push(Box::pin(async move {
            c.execute(&stmt, &[&dbs, &versions, &micros])
                .await
                .map(drop)
        }));
    }
    if commit {
        let c = conn.clone();
        jobs.push(Box::pin(async move { c.batch_execute("COMMIT").await }));
    }
    // A statement that fails aborts the transaction: those after it fail too, and the
    // `COMMIT` rolls back; the first error is the answer.
    for r in futures_util::future::join_all(jobs).await {
        r?;
    }
    Ok(())
}

/// What a read ahead found: every head and row asked for (`None`: absent), so later reads
/// of them need no round trip.
#[derive(Default)]
pub(super) struct Ahead {
    heads: HashMap<String, Option<Head>>,
    rows: HashMap<(Tab, Vec<u8>), Option<Vec<u8>>>,
}

impl Ahead {
    /// Database `db`'s head as read ahead (`None`: not read ahead).
    pub(super) fn head(&self, db: &str) -> Option<Option<Head>> {
        self.heads.get(db).copied()
    }

    /// Notes database `db`'s head as read (valid for the transaction that read it).
    pub(super) fn set_head(&mut self, db: &str, head: Option<Head>) {
        self.heads.insert(db.to_owned(), head);
    }

    /// Row `key` of `t` as read ahead (`None`: not read ahead).
    pub(super) fn row(&self, t: Tab, key: &[u8]) -> Option<Option<Vec<u8>>> {
        self.rows.get(&(t, key.to_vec())).cloned()
    }

    /// Adds what another read ahead found.
    pub(super) fn merge(&mut self, other: Ahead) {
        self.heads.extend(other.heads);
        self.rows.extend(other.rows);
    }
}

/// Reads the heads of `names` (locked for the transaction with `lock`, in name order) and
/// the rows `keys`, pipelined: the server runs them in order, so the rows are read after
/// the locks are taken.
pub(super) async fn read_ahead(
    conn: Arc<PgConn>,
    names: Vec<String>,
    lock: bool,
    keys: Vec<(Tab, Vec<u8>)>,
) -> Result<Ahead, StoreError> {
    let sql = match lock {
        true => {
            "SELECT db, version, commit_micros, catalog FROM hearth_heads \
             WHERE db = ANY($1) ORDER BY db FOR UPDATE"
        }
        false => "SELECT db, version, commit_micros, catalog FROM hearth_heads WHERE db = ANY($1)",
    };
    let heads_stmt = conn.prepare_cached(sql).await.map_err(sql_err)?;
    let mut by_table: [Vec<Vec<u8>>; 4] = Default::default();
    for (t, k) in &keys {
        by_table[*t as usize].push(k.clone());
    }
    let mut reads = Vec::new();
    for (t, keys) in TABS.into_iter().zip(by_table) {
        if keys.is_empty() {
            continue;
        }
        let sql = format!("SELECT key, value FROM {} WHERE key = ANY($1)", table(t));
        let stmt = conn.prepare_cached(&sql).await.map_err(sql_err)?;
        reads.push((t, stmt, keys));
    }
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&names];
    let heads = conn.query(&heads_stmt, &params);
    let c = &conn;
    let rows = futures_util::future::join_all(
        reads
            .iter()
            .map(|(t, stmt, keys)| async move { (*t, c.query(stmt, &[keys]).await) }),
    );
    let (heads, rows) = tokio::join!(heads, rows);
    let mut ahead = Ahead {
        heads: names.into_iter().map(|d| (d, None)).collect(),
        rows: keys.into_iter().map(|k| (k, None)).collect(),
    };
    for r in heads.map_err(sql_err)? {
        ahead.heads.insert(r.get(0), Some(head_of(&r, 1)));
    }
    for (t, r) in rows {
        for row in r.map_err(sql_err)? {
            ahead.rows.insert((t, row.get(0)), Some(row.get(1)));
        }
    }
    Ok(ahead)
}

impl PgWrite {
    pub(super) fn new(reader: Reader) -> PgWrite {
        PgWrite {
            reader,
            pending: Pending::default(),
            cache: Ahead::default(),
            retry: None,
        }
    }

    /// `head` (as stored) with this transaction's own changes to it.
    fn pending_head(&self, db: &str, head: Option<Head>) -> Option<Head> {
        let mut head = match (head, self.pending.heads.get(db)) {
            (h, None) => h,
            (h, Some(&(version, micros))) => Some(Head {
                version,
                micros,
                catalog: h.map_or(0, |h| h.catalog),
            }),
        };
        if let (Some(h), Some(g)) = (head.as_mut(), self.pending.catalogs.get(db)) {
            h.catalog = *g;
        }
        head
    }

    /// Notes a failure: one to serialize makes the transaction run again.
    fn check<T>(&mut self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Serialization(m)) = &r {
            self.retry.get_or_insert_with(|| m.clone());
        }
        r
    }

    /// Sends the buffered writes of table `t` now (a range read or a prune follows).
    fn flush_table(&mut self, t: Tab) -> Result<(), StoreError> {
        let rows = std::mem::take(&mut self.pending.tables[t as usize]);
        if rows.is_empty() {
            return Ok(());
        }
        let mut pending = Pending::default();
        pending.tables[t as usize] = rows;
        let r = self
            .reader
            .run(move |conn| async move { send(conn, pending, false).await.map_err(sql_err) });
        self.check(r)
    }

    /// Sends every buffered write and commits: the heads it moved.
    pub(super) fn commit(&mut self) -> Result<Vec<(String, u64)>, StoreError> {
        let pending = std::mem::take(&mut self.pending);
        let changed = pending
            .heads
            .iter()
            .map(|(d, (v, _))| (d.clone(), *v))
            .collect();
        let r = self
            .reader
            .run(move |conn| async move { send(conn, pending, true).await.map_err(sql_err) });
        self.check(r)?;
        Ok(changed)
    }

    /// Ends the transaction without committing (nothing to do if it never began).
    pub(super) fn roll_back(&self) {
        if self.reader.begun() {
            let _ = self.reader.batch("ROLLBACK");
        }
    }
}

impl ReadTxn for PgWrite {
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(v) = self.pending.tables[t as usize].get(key) {
            return Ok(v.clone());
        }
        match self.cache.row(t, key) {
            Some(v) => Ok(v),
            None => self.reader.get(t, key),
        }
    }

    fn range(
        &self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        if start < end
            && self.pending.tables[t as usize]
                .range(start.to_vec()..end.to_vec())
                .next()
                .is_some()
        {
            return Err(StoreError::Postgres(
                "a range read over this transaction's own unsent writes".into(),
            ));
        }
        self.reader.range(t, start, end, reverse, limit)
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self.pending.meta.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.reader.meta(key),
        }
    }

    fn head(&self, db: &str) -> Result<Option<Head>, StoreError> {
        let head = match self.cache.head(db) {
            Some(h) => h,
            None => self.reader.head(db, false)?,
        };
        Ok(self.pending_head(db, head))
    }
}

impl WriteTxn for PgWrite {
    fn put(&mut self, t: Tab, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.pending.tables[t as usize].insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    fn delete(&mut self, t: Tab, key: &[u8]) -> Result<(), StoreError> {
        self.pending.tables[t as usize].insert(key.to_vec(), None);
        Ok(())
    }

    fn retain(
        &mut self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.flush_table(t)?;
        let mut from = start.to_vec();
        loop {
            let rows = self.reader.range(t, &from, end, false, 1024);
            let rows = self.check(rows)?;
            for (k, v) in &rows {
                if !keep(k, v) {
                    self.pending.tables[t as usize].insert(k.clone(), None);
                }
            }
            match rows.last() {
                Some((k, _)) if rows.len() == 1024 => {
                    from = k.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        self.flush_table(t)
    }

    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.pending
            .meta
            .insert(key.to_owned(), Some(value.to_vec()));
        Ok(())
    }

    fn delete_meta(&mut self, key: &str) -> Result<(), StoreError> {
        self.pending.meta.insert(key.to_owned(), None);
        Ok(())
    }

    fn lock_head(&mut self, db: &str) -> Result<Option<Head>, StoreError> {
        let r = self.reader.head(db, true);
        let head = self.check(r)?;
        self.cache.set_head(db, head);
        Ok(self.pending_head(db, head))
    }

    fn begin_commit(
        &mut self,
        dbs: &[&str],
        reads: &[(Tab, Vec<u8>)],
    ) -> Result<Vec<Option<Head>>, StoreError> {
        let names: Vec<String> = dbs.iter().map(|d| (*d).to_owned()).collect();
        let keys = reads.to_vec();
        let r = self
            .reader
            .run(move |conn| read_ahead(conn, names, true, keys));
        let ahead = self.check(r)?;
        let heads = dbs.iter().map(|d| ahead.head(d).flatten()).collect();
        self.cache.merge(ahead);
        Ok(heads)
    }

    fn set_head(&mut self, db: &str, version: u64, micros: i64) -> Result<(), StoreError> {
        self.pending.heads.insert(db.to_owned(), (version, micros));
        Ok(())
    }

    fn set_catalog_generation(&mut self, db: &str, generation: u64) -> Result<(), StoreError> {
        self.pending.catalogs.insert(db.to_owned(), generation);
        Ok(())
    }

    fn max_key_bytes(&self) -> Option<usize> {
        Some(MAX_KEY_BYTES)
    }
}
