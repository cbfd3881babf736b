//! Firestore values: the eleven types, their total order across types, and strict equality.
//!
//! Two notions of "same" exist and are kept apart on purpose:
//! - [`Value::cmp_order`] is the query order of SEMANTICS.md: int64 and double compare
//!   numerically (`1 == 1.0`, `-0.0 == 0`), NaN sorts first and equals NaN. `==`, `!=`,
//!   ranges, `orderBy` and cursors use it.
//! - `PartialEq` is strict equality: same type and same value (`1 != 1.0`, `-0.0 != 0.0`,
//!   `NaN == NaN`). `in`, `not-in`, `array-contains` and `array-contains-any` use it, and so do
//!   round-trip tests.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::path::DocumentName;

/// A map value. Keys are kept sorted by UTF-8 bytes (Rust's `String` order), which is
/// Firestore's map key order, so input key order never matters.
pub type Map = BTreeMap<String, Value>;

/// One Firestore value.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Boolean(bool),
    Integer(i64),
    Double(f64),
    Timestamp(Timestamp),
    String(String),
    Bytes(Vec<u8>),
    Reference(DocumentName),
    GeoPoint(GeoPoint),
    Array(Vec<Value>),
    Map(Map),
}

/// The type classes of Firestore's cross-type order, in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TypeClass {
    Null,
    Boolean,
    Number,
    Timestamp,
    String,
    Bytes,
    Reference,
    GeoPoint,
    Array,
    Map,
}

/// A point in time: seconds since the Unix epoch and nanoseconds, truncated to microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Seconds since the Unix epoch, within [`MIN_TIMESTAMP_SECONDS`] and
    /// [`MAX_TIMESTAMP_SECONDS`] (private: [`Timestamp::new`] checks the range).
    seconds: i64,
    /// Nanoseconds within the second: `0..1e9` and a whole number of microseconds (private:
    /// `new` truncates, so equal instants have one representation).
    nanos: i32,
}

/// Earliest representable timestamp: 0001-01-01T00:00:00Z.
pub const MIN_TIMESTAMP_SECONDS: i64 = -62_135_596_800;
/// Latest representable timestamp: 9999-12-31T23:59:59.999999Z.
pub const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;

/// A timestamp outside Firestore's range, or with nanoseconds outside `0..1e9`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("timestamp out of range: seconds {seconds}, nanoseconds {nanos} (allowed: years 1 to 9999, nanoseconds 0 to 999999999)")]
pub struct TimestampRangeError {
    /// The seconds that were asked for.
    pub seconds: i64,
    /// The nanoseconds that were asked for.
    pub nanos: i64,
}

impl Timestamp {
    /// Builds a timestamp, truncating nanoseconds to whole microseconds.
    pub fn new(seconds: i64, nanos: i64) -> Result<Timestamp, TimestampRangeError> {
        if !(0..1_000_000_000).contains(&nanos)
            || !(MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS).contains(&seconds)
        {
            return Err(TimestampRangeError { seconds, nanos });
        }
        Ok(Timestamp {
            seconds,
            nanos: (nanos - nanos % 1000) as i32,
        })
    }

    /// Milliseconds since the epoch (may be negative).
    pub fn from_millis(millis: i64) -> Result<Timestamp, TimestampRangeError> {
        Timestamp::new(millis.div_euclid(1000), millis.rem_euclid(1000) * 1_000_000)
    }

    /// Microseconds since the epoch: the timestamp's full precision.
    pub fn from_micros(micros: i64) -> Result<Timestamp, TimestampRangeError> {
        Timestamp::new(
            micros.div_euclid(1_000_000),
            micros.rem_euclid(1_000_000) * 1000,
        )
    }

    pub fn seconds(&self) -> i64 {
        self.seconds
    }

    pub fn nanos(&self) -> i32 {
        self.nanos
    }

    pub fn to_millis(&self) -> i64 {
        self.seconds * 1000 + i64::from(self.nanos) / 1_000_000
    }

    pub fn to_micros(&self) -> i64 {
        self.seconds * 1_000_000 + i64::from(self.nanos) / 1000
    }
}

/// A latitude/longitude pair. Ordered by latitude, then longitude.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeoPoint {
    /// Degrees in `[-90, 90]`, never -0.0 (private: [`GeoPoint::new`] checks and normalizes).
    latitude: f64,
    /// Degrees in `[-180, 180]`, never -0.0.
    longitude: f64,
}

/// A geopoint whose latitude is outside [-90, 90] or longitude outside [-180, 180].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("geopoint out of range: latitude {latitude} must be in [-90, 90] and longitude {longitude} in [-180, 180]")]
pub struct GeoPointRangeError {
    /// The latitude that was asked for.
    pub latitude: f64,
    /// The longitude that was asked for.
    pub longitude: f64,
}

impl GeoPoint {
    pub fn new(latitude: f64, longitude: f64) -> Result<GeoPoint, GeoPointRangeError> {
        if !(-90.0..=90.0).contains(&latitude) || !(-180.0..=180.0).contains(&longitude) {
            return Err(GeoPointRangeError {
                latitude,
                longitude,
            });
        }
        // -0.0 and 0.0 are the same place; keep one representation.
        Ok(GeoPoint {
            latitude: latitude + 0.0,
            longitude: longitude + 0.0,
        })
    }

    pub fn latitude(&self) -> f64 {
        self.latitude
    }

    pub fn longitude(&self) -> f64 {
        self.longitude
    }
}

/// A finite or infinite number split so that int64 and double compare exactly:
/// `base` is the largest double not above the number and `rest` the non-negative remainder
/// (`number == base + rest`). Doubles have `rest == 0`; only int64 values beyond 2^53 have a
/// remainder, and it is below 2^11. Lexicographic order of `(base, rest)` is numeric order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NumberKey {
    /// The largest double not above the number (never NaN, never -0.0). Private with
    /// `rest`: only [`NumberKey::of_int`] and [`NumberKey::of_double`] make the split, so
    /// every key is the one split of its number and order-equal numbers have equal keys.
    base: f64,
    /// What the double `base` misses of an int64 beyond 2^53: below 2^11, zero for doubles.
    rest: u16,
}

impl NumberKey {
    pub fn of_int(i: i64) -> NumberKey {
        let mut base = i as f64;
        if base as i128 > i128::from(i) {
            base = base.next_down();
        }
        let rest = (i128::from(i) - base as i128) as u16;
        NumberKey { base, rest }
    }

    /// `None` for NaN, which sorts before every other number.
    pub fn of_double(d: f64) -> Option<NumberKey> {
        if d.is_nan() {
            return None;
        }
        // Adding 0.0 turns -0.0 into 0.0.
        Some(NumberKey {
            base: d + 0.0,
            rest: 0,
        })
    }

    /// The largest double not above the number.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// The non-negative remainder: `number == base + rest`.
    pub fn rest(&self) -> u16 {
        self.rest
    }

    pub fn cmp_key(&self, other: &NumberKey) -> Ordering {
        self.base
            .total_cmp(&other.base)
            .then(self.rest.cmp(&other.rest))
    }
}

impl Value {
    pub fn type_class(&self) -> TypeClass {
        match self {
            Value::Null => TypeClass::Null,
            Value::Boolean(_) => TypeClass::Boolean,
            Value::Integer(_) | Value::Double(_) => TypeClass::Number,
            Value::Timestamp(_) => TypeClass::Timestamp,
            Value::String(_) => TypeClass::String,
            Value::Bytes(_) => TypeClass::Bytes,
            Value::Reference(_) => TypeClass::Reference,
            Value::GeoPoint(_) => TypeClass::GeoPoint,
            Value::Array(_) => TypeClass::Array,
            Value::Map(_) => TypeClass::Map,
        }
    }

    /// The number's exact key, `None` for NaN. Panics on non-numbers (an internal misuse).
    pub fn number_key(&self) -> Option<NumberKey> {
        match self {
            Value::Integer(i) => Some(NumberKey::of_int(*i)),
            Value::Double(d) => NumberKey::of_double(*d),
            other => panic!("number_key called on {:?}", other.type_class()),
        }
    }

    pub fn is_nan(&self) -> bool {
        matches!(self, Value::Double(d) if d.is_nan())
    }

    /// Firestore's total query order across all types.
    pub fn cmp_order(&self, other: &Value) -> Ordering {
        let (ca, cb) = (self.type_class(), other.type_class());
        if ca != cb {
            return ca.cmp(&cb);
        }
        match (self, other) {
            (Value::Null, Value::Null) => Ordering::Equal,
            (Value::Boolean(a), Value::Boolean(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) => a.cmp(b),
            (Value::String(a), Value::String(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Value::Bytes(a), Value::Bytes(b)) => a.cmp(b),
            (Value::Reference(a), Value::Reference(b)) => a.cmp(b),
            (Value::GeoPoint(a), Value::GeoPoint(b)) => a
                .latitude
                .total_cmp(&b.latitude)
                .then(a.longitude.total_cmp(&b.longitude)),
            (Value::Array(a), Value::Array(b)) => {
                for (x, y) in a.iter().zip(b) {
                    let o = x.cmp_order(y);
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                a.len().cmp(&b.len())
            }
            (Value::Map(a), Value::Map(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                    let o = ka
                        .as_bytes()
                        .cmp(kb.as_bytes())
                        .then_with(|| va.cmp_order(vb));
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                a.len().cmp(&b.len())
            }
            _ => match (self.number_key(), other.number_key()) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(a), Some(b)) => a.cmp_key(&b),
            },
        }
    }

    /// Query equality (`==`): equal in the query order.
    pub fn eq_order(&self, other: &Value) -> bool {
        self.cmp_order(other) == Ordering::Equal
    }

    /// The map inside, if this is a map.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
}

impl PartialEq for Value {
    /// Strict equality: see the module doc.
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Boolean(a), Value::Boolean(b)) => a == b,
            (Value::Integer(a), Value::Integer(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => {
                (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
            }
            (Value::Timestamp(a), Value::Timestamp(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            (Value::Reference(a), Value::Reference(b)) => a == b,
            (Value::GeoPoint(a), Value::GeoPoint(b)) => {
                a.latitude.to_bits() == b.latitude.to_bits()
                    && a.longitude.to_bits() == b.longitude.to_bits()
            }
            (Value::Array(a), Value::Array(b)) => a == b,
            (Value::Map(a), Value::Map(b)) => a == b,
            _ => false,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Integer(i)
    }
}

impl From<f64> for Value {
    fn from(d: f64) -> Value {
        Value::Double(d)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Boolean(b)
    }
}

impl From<Timestamp> for Value {
    fn from(t: Timestamp) -> Value {
        Value::Timestamp(t)
    }
}

impl From<Map> for Value {
    fn from(m: Map) -> Value {
        Value::Map(m)
    }
}

impl From<Vec<Value>> for Value {
    fn from(a: Vec<Value>) -> Value {
        Value::Array(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_and_doubles_compare_exactly() {
        let big = Value::Integer(i64::MAX);
        let two63 = Value::Double(9_223_372_036_854_775_808.0);
        assert_eq!(big.cmp_order(&two63), Ordering::Less);
        let near = Value::Integer((1 << 53) + 1);
        let d = Value::Double((1u64 << 53) as f64);
        assert_eq!(near.cmp_order(&d), Ordering::Greater);
        assert!(Value::Integer(1).eq_order(&Value::Double(1.0)));
        assert_ne!(Value::Integer(1), Value::Double(1.0));
        assert!(Value::Double(-0.0).eq_order(&Value::Integer(0)));
        assert_ne!(Value::Double(-0.0), Value::Double(0.0));
        assert_eq!(Value::Double(f64::NAN), Value::Double(f64::NAN));
        assert_eq!(
            Value::Double(f64::NAN).cmp_order(&Value::Double(f64::NEG_INFINITY)),
            Ordering::Less
        );
        assert_eq!(
            Value::Integer(i64::MIN).cmp_order(&Value::Double(-9.3e18)),
            Ordering::Greater
        );
    }

    #[test]
    fn strings_compare_by_utf8_bytes() {
        let a = Value::from("\u{FFFD}");
        let b = Value::from("😀");
        assert_eq!(a.cmp_order(&b), Ordering::Less);
    }

    #[test]
    fn timestamps_truncate_to_micros_and_check_range() {
        let t = Timestamp::new(5, 123_456_789).unwrap();
        assert_eq!(t.nanos(), 123_456_000);
        assert!(Timestamp::new(MAX_TIMESTAMP_SECONDS + 1, 0).is_err());
        assert!(Timestamp::new(0, 1_000_000_000).is_err());
        assert_eq!(Timestamp::from_millis(-1).unwrap().seconds(), -1);
        assert_eq!(Timestamp::from_millis(-1).unwrap().to_millis(), -1);
    }
}
