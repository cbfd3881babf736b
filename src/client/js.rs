//! Small helpers over JavaScript values that the value classes (`types`) and the conversion
//! of data (`convert`) share, and the sync layer's token reading: number classification and
//! printing, plain-object tests, error texts, base64, interned names. A leaf: it names neither of those
//! modules, so they can depend on it without depending on each other both ways.

use std::cell::{OnceCell, RefCell};

use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use hearth_core::value::Value;
use wasm_bindgen::prelude::wasm_bindgen;

#[wasm_bindgen]
extern "C" {
    /// A plain object seen as one whose properties are assigned directly.
    #[wasm_bindgen(extends = Object)]
    type Assignable;

    /// `this[key] = value`, with no exception handling around it (`Reflect.set` goes through
    /// wasm-bindgen's `catch` wrapper on every call, a cost per property of each document
    /// converted).
    #[wasm_bindgen(method, structural, indexing_setter)]
    fn assign(this: &Assignable, key: &JsValue, value: &JsValue);
}

/// Sets `key` of the fresh plain object `o` (made by this crate, not frozen, no accessor of
/// its own) to `value`. An assignment calls an inherited `__proto__` setter, so the callers
/// never pass that key here.
pub(crate) fn set_fresh(o: &Object, key: &JsValue, value: &JsValue) {
    o.unchecked_ref::<Assignable>().assign(key, value);
}

/// `Number.MAX_SAFE_INTEGER`: 2^53 − 1.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Longest string [`interned`] keeps, in bytes.
const INTERNED_LEN: usize = 64;

/// Slots of [`interned`]'s cache (a power of two).
const INTERNED_SLOTS: usize = 4096;

thread_local! {
    static OBJECT_PROTOTYPE: OnceCell<JsValue> = const { OnceCell::new() };
    /// JS strings made before, one per slot of their hash.
    static INTERNED: RefCell<Vec<Option<(Box<str>, JsValue)>>> = const { RefCell::new(Vec::new()) };
}

/// `s` as a JS string, made once while it holds its slot of a small cache (one string per
/// slot of its hash; a string that does not repeat costs a hash and the slot). Field
/// names, document ids and short string values come back with every document converted,
/// and a lookup here costs less than decoding the same UTF-8 into a new JS string each time.
pub(crate) fn interned(s: &str) -> JsValue {
    if s.len() > INTERNED_LEN {
        return JsValue::from_str(s);
    }
    // FNV-1a.
    let hash = s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let slot = hash as usize & (INTERNED_SLOTS - 1);
    INTERNED.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.is_empty() {
            cache.resize_with(INTERNED_SLOTS, || None);
        }
        match &mut cache[slot] {
            Some((held, js)) if **held == *s => js.clone(),
            entry => {
                let js = JsValue::from_str(s);
                *entry = Some((s.into(), js.clone()));
                js
            }
        }
    })
}

/// A JS number as Firestore's SDK sends it: `Integer` for safe integers, else `Double`.
pub fn number_value(n: f64) -> Value {
    let negative_zero = n == 0.0 && n.is_sign_negative();
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER && !negative_zero {
        Value::Integer(n as i64)
    } else {
        Value::Double(n)
    }
}

/// A number as JS prints it (`NaN`, `Infinity`, `1`, `1.5`).
pub(crate) fn js_number(n: f64) -> String {
    if n.is_infinite() {
        return if n > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if n == 0.0 && n.is_sign_negative() {
        return "-0".into();
    }
    n.to_string()
}

/// Whether `v` is a plain object: prototype `Object.prototype` (of this realm) or `null`.
pub(crate) fn is_plain_object(v: &JsValue) -> bool {
    if !v.is_object() || Array::is_array(v) {
        return false;
    }
    let proto = Object::get_prototype_of(v);
    proto.is_null()
        || OBJECT_PROTOTYPE.with(|p| {
            let object_prototype =
                p.get_or_init(|| Object::get_prototype_of(&Object::new().into()).into());
            Object::is(&proto, object_prototype)
        })
}

/// The name of `v`'s constructor, if it has a named one (`a custom Foo object`).
pub(crate) fn constructor_name(v: &JsValue) -> Option<String> {
    let ctor = Reflect::get(v, &JsValue::from_str("constructor")).ok()?;
    let name = String::from(ctor.dyn_ref::<Function>()?.name());
    (!name.is_empty()).then_some(name)
}

/// The text of a thrown JS value: an `Error`'s message, a string, or its debug form.
pub(crate) fn js_error_text(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    e.as_string().unwrap_or_else(|| format!("{e:?}"))
}

/// A fresh plain object with `entries` as its properties (for `toJSON()`).
pub(crate) fn json_object(entries: &[(&str, JsValue)]) -> Object {
    let o = Object::new();
    for (k, v) in entries {
        set_fresh(&o, &JsValue::from_str(k), v);
    }
    o
}

/// The standard base64 alphabet.
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes with the standard alphabet, padded.
pub(crate) fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes like `atob`: ASCII whitespace is skipped and padding may be left out, but a
/// stray character, misplaced padding or an impossible length is refused.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut symbols: Vec<u8> = s
        .bytes()
        .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0c' | b'\r'))
        .collect();
    if symbols.len().is_multiple_of(4) && symbols.ends_with(b"==") {
        symbols.truncate(symbols.len() - 2);
    } else if symbols.len().is_multiple_of(4) && symbols.ends_with(b"=") {
        symbols.truncate(symbols.len() - 1);
    }
    if symbols.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(symbols.len() / 4 * 3 + 2);
    for chunk in symbols.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let v = BASE64.iter().position(|&x| x == c)? as u32;
            n |= v << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    Some(out)
}

/// Resolves after `ms` milliseconds (`setTimeout`, in a page or a worker).
pub async fn sleep(ms: f64) {
    let _ = wasm_bindgen_futures::JsFuture::from(timer(ms)).await;
}

/// A promise that resolves after `ms` milliseconds.
pub fn timer(ms: f64) -> js_sys::Promise {
    js_sys::Promise::new(&mut |resolve, _| {
        let global = js_sys::global();
        if let Ok(st) =
            Reflect::get(&global, &"setTimeout".into()).and_then(|f| f.dyn_into::<Function>())
        {
            let _ = st.call2(&global, &resolve, &JsValue::from_f64(ms));
        }
    })
}

/// Runs two futures at once and gives both outputs (IndexedDB requests and Web Lock
/// requests made together overlap their round trips).
pub async fn join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    use std::task::Poll;
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    match (ra, rb) {
        (Some(a), Some(b)) => (a, b),
        _ => unreachable!("both are ready"),
    }
}
