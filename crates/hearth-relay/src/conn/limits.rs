//! Connection limits by key: client address (`--max-connections-per-address`), database
//! (`--max-connections-per-database`) and token subject (`--max-connections-per-subject`).
//!
//! A connection holds one [`Held`] per limit it counts under; dropping it (on any exit
//! path, a panic's unwinding included) gives the place back.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::config::Config;

/// At most `max` holders per key at once.
pub(crate) struct KeyedLimit<K: Eq + Hash> {
    /// Most holders per key.
    max: usize,
    /// Holders per key; a key is removed when its last holder is dropped.
    counts: Arc<Mutex<HashMap<K, usize>>>,
}

/// One place under a [`KeyedLimit`], given back on drop.
pub(crate) struct Held<K: Eq + Hash> {
    /// The key held (taken on drop).
    key: Option<K>,
    /// The counts of the limit it was taken from.
    counts: Arc<Mutex<HashMap<K, usize>>>,
}

/// Locks a count map; a panic while it was held left plain numbers behind, so poisoning is
/// ignored (a guard must release even then).
fn lock<K>(m: &Mutex<HashMap<K, usize>>) -> MutexGuard<'_, HashMap<K, usize>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Eq + Hash + Clone> KeyedLimit<K> {
    pub(crate) fn new(max: usize) -> KeyedLimit<K> {
        KeyedLimit {
            max,
            counts: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The limit per key.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A place for `key`, or `None` when `key` already has `max` holders.
    pub(crate) fn try_hold(&self, key: K) -> Option<Held<K>> {
        let mut counts = lock(&self.counts);
        let n = counts.entry(key.clone()).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Held {
            key: Some(key),
            counts: self.counts.clone(),
        })
    }

    /// How many hold `key` now.
    #[cfg(test)]
    pub(crate) fn count(&self, key: &K) -> usize {
        lock(&self.counts).get(key).copied().unwrap_or(0)
    }

    /// How many keys have holders (emptied keys are removed).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        lock(&self.counts).len()
    }
}

impl<K: Eq + Hash> Drop for Held<K> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut counts = lock(&self.counts);
        if let Some(n) = counts.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&key);
            }
        }
    }
}

/// The key a client address counts under: an IPv4 address (IPv4-mapped IPv6 ones too)
/// as it is, an IPv6 address by its /64 prefix, since one client commonly holds a whole /64
/// and could otherwise pick a fresh address per connection.
pub(crate) fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// The relay's keyed connection limits.
pub(crate) struct Limits {
    /// WebSocket connections per client IP address ([`address_key`]), counted at the
    /// upgrade.
    pub(crate) address: KeyedLimit<IpAddr>,
    /// Connections per database, counted once the `Hello` is verified.
    pub(crate) database: KeyedLimit<String>,
    /// Connections per token subject (`sub`), counted once the `Hello` is verified, moved
    /// when an `Auth` brings a token of another subject.
    pub(crate) subject: KeyedLimit<String>,
}

impl Limits {
    pub(crate) fn new(config: &Config) -> Limits {
        Limits {
            address: KeyedLimit::new(config.max_connections_per_address),
            database: KeyedLimit::new(config.max_connections_per_database),
            subject: KeyedLimit::new(config.max_connections_per_subject),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_up_to_max_per_key_and_releases_on_drop() {
        let l = KeyedLimit::new(2);
        let a1 = l.try_hold("a").unwrap();
        let a2 = l.try_hold("a").unwrap();
        assert!(l.try_hold("a").is_none());
        let b = l.try_hold("b").unwrap();
        assert_eq!((l.count(&"a"), l.count(&"b")), (2, 1));
        drop(a1);
        let a3 = l.try_hold("a").unwrap();
        drop((a2, a3, b));
        assert_eq!(l.keys(), 0, "emptied keys are removed");
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_prefix() {
        let key = |s: &str| address_key(s.parse().unwrap());
        assert_eq!(key("192.0.2.7"), key("::ffff:192.0.2.7"));
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
    }

    #[test]
    fn a_panic_releases_what_it_held() {
        let l = KeyedLimit::new(1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = l.try_hold(7u32).unwrap();
            panic!("a handler failed");
        }));
        assert!(r.is_err());
        assert_eq!(l.count(&7), 0);
        assert!(l.try_hold(7).is_some());
    }
}
