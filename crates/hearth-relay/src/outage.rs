//! Outages of a shared store, as this relay lives them: it is degraded from the first
//! failure to reach the store (a poll of the heads or a catch-up that failed) or the loss of
//! its notification connection, until it has reached the store again, caught every
//! database open here up with it, and hears notifications again (`crate::tail` decides).
//! `/healthz` answers 503 while degraded; the metrics count outages, the time degraded and
//! the catch-ups made to recover.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics::{family, sample};

/// The outage under way.
#[derive(Debug)]
struct Current {
    /// When it began.
    since: Instant,
    /// What failed last.
    reason: String,
}

/// A relay's store outages: the one under way and counts of those past.
#[derive(Debug, Default)]
pub struct Outages {
    /// The outage under way (`None`: the relay is caught up with the store).
    current: Mutex<Option<Current>>,
    /// Outages begun since start.
    count: AtomicU64,
    /// Time degraded in outages that ended, in microseconds.
    past_micros: AtomicU64,
    /// Databases caught up with the store while recovering from an outage.
    catch_ups: AtomicU64,
}

impl Outages {
    fn current(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes a failure to reach the store, of an attempt begun at `since` (a call that
    /// missed its deadline was waiting all along): begins an outage (true) or, during one,
    /// says what failed last (false).
    pub(crate) fn failed(&self, reason: String, since: Instant) -> bool {
        let mut current = self.current();
        match &mut *current {
            Some(c) => {
                c.reason = reason;
                false
            }
            None => {
                *current = Some(Current { since, reason });
                self.count.fetch_add(1, Relaxed);
                true
            }
        }
    }

    /// Ends the outage under way: how long it lasted (`None`: there was none).
    pub(crate) fn recovered(&self) -> Option<Duration> {
        let c = self.current().take()?;
        let lasted = c.since.elapsed();
        self.past_micros
            .fetch_add(lasted.as_micros() as u64, Relaxed);
        Some(lasted)
    }

    /// A database was caught up with the store while recovering from an outage.
    pub(crate) fn caught_up(&self) {
        self.catch_ups.fetch_add(1, Relaxed);
    }

    /// The outage under way: for how long, and what failed last.
    pub fn degraded(&self) -> Option<(Duration, String)> {
        let current = self.current();
        current
            .as_ref()
            .map(|c| (c.since.elapsed(), c.reason.clone()))
    }

    /// The outage series in the Prometheus text format.
    pub(crate) fn render(&self, out: &mut String) {
        let ongoing = self.degraded().map(|(d, _)| d);
        let degraded =
            Duration::from_micros(self.past_micros.load(Relaxed)) + ongoing.unwrap_or_default();
        let series: [(&str, &str, &str, String); 4] = [
            (
                "hearth_store_degraded",
                "1 while this relay cannot reach the shared store or is catching up with it.",
                "gauge",
                u8::from(ongoing.is_some()).to_string(),
            ),
            (
                "hearth_store_outages_total",
                "Outages of the shared store (failures to reach it, a lost notification connection).",
                "counter",
                self.count.load(Relaxed).to_string(),
            ),
            (
                "hearth_store_degraded_seconds_total",
                "Time spent degraded by outages of the shared store, the one under way included.",
                "counter",
                format!("{:.3}", degraded.as_secs_f64()),
            ),
            (
                "hearth_store_outage_catch_ups_total",
                "Databases caught up with the shared store while recovering from an outage.",
                "counter",
                self.catch_ups.load(Relaxed).to_string(),
            ),
        ];
        for (name, help, kind, value) in series {
            family(out, name, help, kind);
            sample(out, name, &[], &value);
        }
    }
}
