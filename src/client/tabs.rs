//! The settle message contexts (tabs, workers) of one origin send each other over their
//! BroadcastChannel when one of them takes the relay's answer to a batch of the shared write
//! queue, so that whichever context waits on that batch settles its promise.
//!
//! ```text
//! acknowledged: { settled: batch id, version }
//! refused:      { settled: batch id, tag: ErrorCode::tag, code: the code's text, message }
//! ```
//!
//! `code` is for contexts of earlier builds (a tab left open across a deploy), which read only
//! that. A refusal that carries no tag (from such a context) stays a refusal, with code
//! `internal` and its text in the message: codes are never parsed back from text, and a
//! message that is not understood must never read as an acknowledgement.
//!
//! Contexts also claim distinct batch-id tags (see `Engine::next_batch_id`) with Web Locks:
//! [`claim_tag`].

use hearth_core::error::ErrorCode;
use js_sys::Reflect;
use wasm_bindgen::JsValue;

use super::error::ClientError;

/// The message announcing batch `id`'s result.
pub fn encode_settled(id: u64, result: &Result<u64, ClientError>) -> JsValue {
    let message = js_sys::Object::new();
    let set = |k: &str, v: JsValue| {
        let _ = Reflect::set(&message, &k.into(), &v);
    };
    set("settled", JsValue::from_f64(id as f64));
    match result {
        Ok(version) => set("version", JsValue::from_f64(*version as f64)),
        Err(e) => {
            set("tag", JsValue::from_f64(f64::from(e.code().tag())));
            set("code", JsValue::from_str(e.code().as_str()));
            set("message", JsValue::from_str(&e.message));
        }
    }
    message.into()
}

/// The batch id and result a settle message carries, or `None` if `data` is not one.
pub fn decode_settled(data: &JsValue) -> Option<(u64, Result<u64, ClientError>)> {
    let id = Reflect::get(data, &"settled".into()).ok()?.as_f64()?;
    let field = |k: &str| {
        Reflect::get(data, &k.into())
            .ok()
            .filter(|v| !v.is_undefined())
    };
    let message = || {
        field("message")
            .and_then(|m| m.as_string())
            .unwrap_or_default()
    };
    let result = if let Some(tag) = field("tag").and_then(|t| t.as_f64()) {
        let code = (tag.fract() == 0.0 && (0.0..=255.0).contains(&tag))
            .then(|| ErrorCode::from_tag(tag as u8))
            .flatten();
        Err(match code {
            Some(code) => ClientError::new(code, message()),
            None => ClientError::new(
                ErrorCode::Internal,
                format!(
                    "another context refused the batch with an unknown error code ({tag}): {}",
                    message()
                ),
            ),
        })
    } else if let Some(code) = field("code") {
        Err(ClientError::new(
            ErrorCode::Internal,
            format!(
                "another context refused the batch ({}): {}",
                code.as_string().unwrap_or_default(),
                message()
            ),
        ))
    } else {
        Ok(field("version").and_then(|v| v.as_f64()).unwrap_or(0.0) as u64)
    };
    Some((id as u64, result))
}

/// Claims a batch-id tag (0..128) that no other live context of this origin holds for
/// `database`: an exclusive Web Lock per tag, taken only if free and held until the returned
/// function is called (or the context goes). `None` where Web Locks are missing or all 128
/// are held; the caller then picks a random tag.
pub async fn claim_tag(database: &str, start: u8) -> Option<(u8, js_sys::Function)> {
    crate::client::cache::locks()?;
    for i in 0..128u8 {
        let tag = start.wrapping_add(i) & 0x7f;
        let name = format!("hearth:batch-tag:{database}:{tag}");
        if let Some(release) = super::origin::request_lock(&name, true).await {
            return Some((tag, release));
        }
    }
    None
}
