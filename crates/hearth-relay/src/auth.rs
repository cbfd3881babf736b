//! Verification of client auth tokens (JWTs) against the keys the relay was started with.
//!
//! A client presents its token in the handshake; [`Authenticator::verify`] turns it into an
//! [`AuthContext`] (the `request.auth` of the security rules) or an [`AuthError`] the relay
//! sends back as a typed error. Accepted algorithms are HS256 (shared secret), RS256 and
//! ES256 (public keys in PEM). The token's header names its algorithm, and that algorithm
//! alone picks the key: a token is never checked against a key of another family, which
//! rules out the classic "HS256 signed with the RSA public key" confusion.
//!
//! Time is an argument (`now_unix`) rather than read from the clock, so tests control it and
//! the relay can check a connection's token again when it expires. `exp` and `nbf` are
//! checked here with zero leeway; jsonwebtoken's own clock-based checks are switched off.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::Value;

/// Verifies auth tokens. Cheap to clone: the keys are shared behind an [`Arc`].
#[derive(Clone, Debug)]
pub struct Authenticator {
    /// `None` when auth is disabled: every token is accepted and nobody is signed in.
    keys: Option<Arc<Keys>>,
    /// The HS256 key of service tokens (`--service-secret`): trusted server code, which the
    /// security rules do not apply to. Kept apart from the client keys, so no end user's
    /// token can ever pass for one.
    service: Option<Arc<(DecodingKey, Validation)>>,
}

/// The configured keys, at most one per accepted algorithm.
#[derive(Debug)]
struct Keys {
    /// Each validation allows exactly its own algorithm and performs no time, audience or
    /// issuer checks: signature and shape only, the rest is done in [`Authenticator::verify`].
    verifiers: Vec<(Algorithm, DecodingKey, Validation)>,
    /// The `aud` a client token must name (`--auth-audience`), if any.
    audience: Option<String>,
    /// The `iss` a client token must carry (`--auth-issuer`), if any.
    issuer: Option<String>,
}

/// Who a verified token says the caller is; the `request.auth` of the security rules.
#[derive(Clone, Debug, PartialEq)]
pub struct AuthContext {
    /// The signed-in user (`sub`, or Firebase's `user_id`); `None` when the token names no
    /// user or auth is disabled.
    pub uid: Option<String>,
    /// The token's `exp` in unix seconds, when it has one: the relay must stop trusting the
    /// connection's identity at that time.
    pub expires_at: Option<u64>,
    /// All claims of a verified token (`request.auth.token`); `Value::Null` when auth is
    /// disabled, because unverified claims must not reach the rules.
    pub claims: Value,
    /// The databases the token may open (its `databases` claim: a name or an array of
    /// names, `"*"` meaning any); `None` when it has no such claim (or auth is disabled),
    /// and the relay's `--databases` policy alone decides.
    pub databases: Option<Vec<String>>,
    /// A service token (signed with `--service-secret`): trusted server code, past the
    /// security rules, as Firebase's Admin SDK is.
    pub service: bool,
}

impl AuthContext {
    /// The context of a caller nobody vouched for: no uid, no claims.
    pub fn anonymous() -> AuthContext {
        AuthContext {
            uid: None,
            expires_at: None,
            claims: Value::Null,
            databases: None,
            service: false,
        }
    }

    /// Whether the token lets its holder open database `name` (its `databases` claim lists
    /// it or `"*"`, or it has no such claim).
    pub fn may_open(&self, name: &str) -> bool {
        self.databases
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|d| d == "*" || d == name))
    }

    /// Why the token may not open database `name` (a message for the client), or `None`
    /// when it may.
    pub fn database_denied(&self, name: &str) -> Option<String> {
        if self.may_open(name) {
            return None;
        }
        let allowed = self.databases.as_deref().unwrap_or_default();
        Some(format!(
            "this auth token may not open database `{name}`: its `databases` claim allows only [{}]",
            allowed.join(", ")
        ))
    }
}

/// Why a token was refused. Sent to the client, so the messages name no key material.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AuthError {
    /// Auth is enabled and the client presented no token.
    #[error("auth token missing")]
    Missing,
    /// The token's `exp` is not after the current time.
    #[error("auth token expired at {expired_at} (unix seconds)")]
    Expired {
        /// The token's `exp` claim, unix seconds.
        expired_at: u64,
    },
    /// The token is malformed, its signature does not verify against any configured key, or
    /// a claim has the wrong type.
    #[error("auth token invalid: {0}")]
    Invalid(String),
    /// The token's `nbf` is after the current time.
    #[error("auth token not yet valid")]
    NotYetValid,
}

/// Why the relay's auth configuration cannot be used.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum AuthConfigError {
    /// A key file could not be read.
    #[error("cannot read auth key file {path}: {source}")]
    KeyFile {
        /// The file named in the configuration.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// A PEM key could not be parsed or is not a key of the expected kind.
    #[error("bad {algorithm} public key: {reason}")]
    BadKey {
        /// The algorithm the key was configured for, e.g. "RS256".
        algorithm: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// The HS256 secret is empty; anyone could sign tokens with it.
    #[error("the HS256 secret is empty")]
    EmptySecret,
    /// No key was configured; use [`Authenticator::disabled`] to run without auth.
    #[error("no auth key configured")]
    NoKeys,
}

/// Reads a key file (PEM or raw secret) for [`Authenticator::from_keys`]. The bytes are
/// returned as they are: a secret file's trailing newline is part of the secret.
pub fn read_key_file(path: &Path) -> Result<Vec<u8>, AuthConfigError> {
    std::fs::read(path).map_err(|source| AuthConfigError::KeyFile {
        path: path.to_owned(),
        source,
    })
}

impl Authenticator {
    /// Auth switched off: every token is accepted, including the empty one, and every caller
    /// is anonymous. A token's `sub` is not trusted unverified, so `uid` is always `None`.
    pub fn disabled() -> Authenticator {
        Authenticator {
            keys: None,
            service: None,
        }
    }

    /// Also accepts service tokens: HS256 tokens signed with `secret`, which identify
    /// trusted server code (the security rules do not apply to it). The secret must differ
    /// from the client tokens' and must never reach a browser.
    pub fn with_service_secret(mut self, secret: &[u8]) -> Result<Authenticator, AuthConfigError> {
        if secret.is_empty() {
            return Err(AuthConfigError::EmptySecret);
        }
        self.service = Some(Arc::new((
            DecodingKey::from_secret(secret),
            validation_for(Algorithm::HS256),
        )));
        Ok(self)
    }

    /// Verifies HS256 tokens signed with `secret`.
    ///
    /// # Panics
    /// If `secret` is empty: a relay that accepted tokens signed with an empty key would
    /// accept anyone. Configuration from outside goes through [`Authenticator::from_keys`].
    pub fn hs256(secret: &[u8]) -> Authenticator {
        Self::from_keys(Some(secret), None, None).expect("the HS256 secret is not empty")
    }

    /// Verifies tokens signed by any of the configured keys: an HS256 shared secret, an RS256
    /// public key and an ES256 (P-256) public key, both PEM (SubjectPublicKeyInfo, or PKCS#1
    /// for RSA). At least one key is required.
    pub fn from_keys(
        hs256_secret: Option<&[u8]>,
        rs256_public_pem: Option<&[u8]>,
        es256_public_pem: Option<&[u8]>,
    ) -> Result<Authenticator, AuthConfigError> {
        let mut verifiers = Vec::new();
        if let Some(secret) = hs256_secret {
            if secret.is_empty() {
                return Err(AuthConfigError::EmptySecret);
            }
            verifiers.push((Algorithm::HS256, "HS256", DecodingKey::from_secret(secret)));
        }
        if let Some(pem) = rs256_public_pem {
            let key = DecodingKey::from_rsa_pem(pem).map_err(|e| bad_key("RS256", &e))?;
            verifiers.push((Algorithm::RS256, "RS256", key));
        }
        if let Some(pem) = es256_public_pem {
            let key = DecodingKey::from_ec_pem(pem).map_err(|e| bad_key("ES256", &e))?;
            verifiers.push((Algorithm::ES256, "ES256", key));
        }
        if verifiers.is_empty() {
            return Err(AuthConfigError::NoKeys);
        }
        let verifiers = verifiers
            .into_iter()
            .map(|(alg, name, key)| {
                // Building a verifier parses the key where the backend allows it (a P-384 key
                // given for ES256 fails here); the probe signature itself never verifies.
                jsonwebtoken::crypto::verify("AA", b"probe", &key, alg)
                    .map_err(|e| bad_key(name, &e))?;
                Ok((alg, key, validation_for(alg)))
            })
            .collect::<Result<_, AuthConfigError>>()?;
        Ok(Authenticator {
            keys: Some(Arc::new(Keys {
                verifiers,
                audience: None,
                issuer: None,
            })),
            service: None,
        })
    }

    /// Client tokens must also name `audience` in their `aud` claim (a string or an array)
    /// and carry `issuer` as their `iss`, each when given: an identity provider's tokens
    /// for other applications are then refused.
    pub fn expecting(mut self, audience: Option<&str>, issuer: Option<&str>) -> Authenticator {
        if let Some(keys) = self.keys.take() {
            let mut keys = Arc::try_unwrap(keys).unwrap_or_else(|k| Keys {
                verifiers: k.verifiers.clone(),
                audience: k.audience.clone(),
                issuer: k.issuer.clone(),
            });
            keys.audience = audience.map(str::to_owned);
            keys.issuer = issuer.map(str::to_owned);
            self.keys = Some(Arc::new(keys));
        }
        self
    }

    /// Whether tokens are verified at all.
    pub fn is_enabled(&self) -> bool {
        self.keys.is_some()
    }

    /// Verifies `token` at time `now_unix` (unix seconds). The token is valid from its `nbf`
    /// (inclusive) until its `exp` (exclusive), both optional, with no leeway.
    pub fn verify(&self, token: &str, now_unix: u64) -> Result<AuthContext, AuthError> {
        if let Some((key, validation)) = self.service.as_deref() {
            let signed = jsonwebtoken::decode_header(token.trim())
                .ok()
                .filter(|h| h.alg == Algorithm::HS256)
                .and_then(|_| jsonwebtoken::decode::<Value>(token.trim(), key, validation).ok());
            if let Some(data) = signed {
                let mut context = context_of(data.claims, now_unix)?;
                context.service = true;
                return Ok(context);
            }
        }
        let Some(keys) = &self.keys else {
            return Ok(AuthContext::anonymous());
        };
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        let header = jsonwebtoken::decode_header(token).map_err(invalid)?;
        let (_, key, validation) = keys
            .verifiers
            .iter()
            .find(|(alg, ..)| *alg == header.alg)
            .ok_or_else(|| {
                AuthError::Invalid(format!(
                    "algorithm {:?} is not accepted by this relay",
                    header.alg
                ))
            })?;
        let claims = jsonwebtoken::decode::<Value>(token, key, validation)
            .map_err(invalid)?
            .claims;
        let context = context_of(claims, now_unix)?;
        keys.check_audience_and_issuer(&context.claims)?;
        if context.uid.is_none() {
            return Err(AuthError::Invalid(
                "the token names no user: a client token needs a non-empty `sub`".into(),
            ));
        }
        Ok(context)
    }
}

impl Keys {
    /// Refuses a client token whose `aud` does not name the expected audience or whose
    /// `iss` is not the expected issuer.
    fn check_audience_and_issuer(&self, claims: &Value) -> Result<(), AuthError> {
        if let Some(aud) = &self.audience {
            let named = match claims.get("aud") {
                Some(Value::String(a)) => a == aud,
                Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(aud)),
                _ => false,
            };
            if !named {
                return Err(AuthError::Invalid(
                    "the token's `aud` does not name this relay's audience".into(),
                ));
            }
        }
        if let Some(iss) = &self.issuer {
            if claims.get("iss").and_then(Value::as_str) != Some(iss.as_str()) {
                return Err(AuthError::Invalid(
                    "the token's `iss` is not this relay's issuer".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The context of a token whose signature is verified: its time window checked, its
/// subject and `databases` claim read.
fn context_of(claims: Value, now_unix: u64) -> Result<AuthContext, AuthError> {
    if !claims.is_object() {
        return Err(AuthError::Invalid("claims are not a JSON object".into()));
    }
    // Rounding errs on the side of refusing: a fractional `exp` ends early, a fractional
    // `nbf` starts late.
    let expires_at = numeric_date(&claims, "exp", f64::floor)?;
    let not_before = numeric_date(&claims, "nbf", f64::ceil)?;
    if let Some(exp) = expires_at {
        if now_unix >= exp {
            return Err(AuthError::Expired { expired_at: exp });
        }
    }
    if not_before.is_some_and(|nbf| now_unix < nbf) {
        return Err(AuthError::NotYetValid);
    }
    let uid = match (claims.get("sub"), claims.get("user_id")) {
        (Some(v), _) | (None, Some(v)) => Some(
            v.as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| AuthError::Invalid("sub is not a non-empty string".into()))?
                .to_owned(),
        ),
        (None, None) => None,
    };
    let databases = match claims.get("databases") {
        None => None,
        Some(Value::String(name)) => Some(vec![name.clone()]),
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(databases_invalid)?,
        ),
        Some(_) => return Err(databases_invalid()),
    };
    Ok(AuthContext {
        uid,
        expires_at,
        claims,
        databases,
        service: false,
    })
}

fn databases_invalid() -> AuthError {
    AuthError::Invalid("databases is not a database name or an array of names".into())
}

/// Mints an HS256 token for `sub` expiring at `exp_unix`. For tests and the benchmark.
pub fn mint_hs256(secret: &[u8], sub: &str, exp_unix: u64) -> String {
    let claims = serde_json::json!({ "sub": sub, "exp": exp_unix });
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .expect("HMAC signing of a JSON object cannot fail")
}

/// A validation that checks the signature for `alg` and nothing about time, audience or
/// issuer: those are checked (or deliberately not) by [`Authenticator::verify`].
fn validation_for(alg: Algorithm) -> Validation {
    let mut v = Validation::new(alg);
    v.required_spec_claims.clear();
    v.validate_exp = false;
    v.validate_nbf = false;
    v.validate_aud = false;
    v.leeway = 0;
    v
}

/// Reads a NumericDate claim (RFC 7519: seconds, possibly fractional); absent is `None`.
fn numeric_date(
    claims: &Value,
    name: &str,
    round: fn(f64) -> f64,
) -> Result<Option<u64>, AuthError> {
    let Some(v) = claims.get(name) else {
        return Ok(None);
    };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    match v.as_f64() {
        Some(f) if f.is_finite() && f >= 0.0 && f < u64::MAX as f64 => Ok(Some(round(f) as u64)),
        _ => Err(AuthError::Invalid(format!(
            "{name} is not a non-negative number of seconds"
        ))),
    }
}

fn bad_key(algorithm: &'static str, e: &jsonwebtoken::errors::Error) -> AuthConfigError {
    AuthConfigError::BadKey {
        algorithm,
        reason: describe(e),
    }
}

fn invalid(e: jsonwebtoken::errors::Error) -> AuthError {
    AuthError::Invalid(describe(&e))
}

/// A lowercase description of a jsonwebtoken error, for messages sent to clients.
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    match e.kind() {
        ErrorKind::InvalidToken => "not a JWT (header.payload.signature)".into(),
        ErrorKind::InvalidSignature => "signature does not verify".into(),
        ErrorKind::InvalidAlgorithm => "algorithm does not match the key".into(),
        ErrorKind::InvalidKeyFormat => "not a key of the expected kind".into(),
        ErrorKind::InvalidEcdsaKey => "not a P-256 ECDSA key".into(),
        ErrorKind::InvalidRsaKey(reason) => format!("bad RSA key: {reason}"),
        ErrorKind::Base64(err) => format!("bad base64: {err}"),
        ErrorKind::Json(err) => format!("bad JSON: {err}"),
        ErrorKind::Utf8(err) => format!("bad UTF-8: {err}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"test secret, at least as long as a SHA-256 block is wide";
    const NOW: u64 = 1_700_000_000;

    /// A throwaway 2048-bit RSA public key. Its private half was discarded after signing
    /// [`RS256_TOKEN`], so tests need no RSA signing (slow in debug builds).
    const RS256_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA11MF4STPgkrnwjcBvuES
tQG3lKXvEUIHXY+gfVE911BhRBQNASvpZrPD1mRnqoeoqMXfxTmYHBtVqPiNAobf
OEqadermUybdNMWqtlG+tLoiIVQoGL8QdhuoEq3u/F94GkLJkTjhdex7KiZ63ydW
oPLw8OwQQJ/7fdFeckNtYtiCSsZTCG9gGGnbUNFHS96lbr/UAFCQSma2SgD7/TV/
49tMsKY2NRWqSQVYlzsWgrqFUrm2yB3f8dz9mwXGQ07rJTy19EDeoTOQe+j0Lv5N
2pE7RJ7ftCqHub5a7WMtFhGVY4WRb7GLaNJDVCaYsKXG0ns62haCqcM6cpvIS4s+
3wIDAQAB
-----END PUBLIC KEY-----
";
    /// `{"sub":"rsa-user","exp":4102444800,"nbf":1700000000}` signed RS256.
    const RS256_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJyc2EtdXNlciIsImV4cCI6NDEwMjQ0NDgwMCwibmJmIjoxNzAwMDAwMDAwfQ.a-NY72FPAzmojZkjAmuyztH78DyP02ZPrCzFTcPqUxirUxwxL8J_yJZWf9yoiIapkw5v2SjRMARtC3oaJuueB7nYdtltG14mWY08IwEXPQH_fS8Z-LPH7HFId-YCi5TD_lhgWk7Ty91CumB5lwqz1ipAlcx7xlIKrBRsCNFfeuXhzh6AKlFTKVbPKxPyCIBZLK5UXk7XJqJsmLdyaK_YBRFJP_xNRN5hS6KqKjEMi5ge9_M2Nq3yLMtrttsBHT4ridHwh_RRrXwBivJSIxzwxwLkaNYMK6Bu4jKexAD5CtnhKxDtWv_K3P5Vy9CNK0grxSD6c7uebbeYdNMtUunkcQ";

    /// A throwaway P-256 public key; its private half signed [`ES256_TOKEN`].
    const ES256_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEaEQsBT0Jwj4iT6Swtz3avKr7fqwn
HExc3XjxH3Y/+6XrwOwsrqItmkyH0l2co7X4l2T41G7Wvez2+tOOzDNt0A==
-----END PUBLIC KEY-----
";
    /// `{"user_id":"ec-user","exp":4102444800}` signed ES256.
    const ES256_TOKEN: &str = "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJ1c2VyX2lkIjoiZWMtdXNlciIsImV4cCI6NDEwMjQ0NDgwMH0.sKu9nUpHNsgyGyK_0xbY929dl0VXe3_hznTEqLYRCmqNHYkwgTDmUZJekNnrylLYxU6qPTH6Er7EyjGRaDGXXg";

    fn mint(claims: Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap()
    }

    fn is_invalid(r: Result<AuthContext, AuthError>) -> bool {
        matches!(r, Err(AuthError::Invalid(_)))
    }

    #[test]
    fn valid_token_yields_uid_expiry_and_claims() {
        let auth = Authenticator::hs256(SECRET);
        assert!(auth.is_enabled());
        let ctx = auth
            .verify(&mint_hs256(SECRET, "alice", NOW + 60), NOW)
            .unwrap();
        assert_eq!(ctx.uid.as_deref(), Some("alice"));
        assert_eq!(ctx.expires_at, Some(NOW + 60));
        assert_eq!(ctx.claims["sub"], "alice");
    }

    #[test]
    fn expiry_is_exclusive_and_reports_the_time() {
        let auth = Authenticator::hs256(SECRET);
        let token = mint_hs256(SECRET, "alice", NOW);
        assert!(auth.verify(&token, NOW - 1).is_ok());
        let err = auth.verify(&token, NOW).unwrap_err();
        assert_eq!(err, AuthError::Expired { expired_at: NOW });
        assert_eq!(
            err.to_string(),
            "auth token expired at 1700000000 (unix seconds)"
        );
        // Far in the past: no leeway and no clock of jsonwebtoken's own gets in the way.
        assert!(auth.verify(&mint_hs256(SECRET, "a", 10), 5).is_ok());
    }

    #[test]
    fn not_before_is_inclusive() {
        let auth = Authenticator::hs256(SECRET);
        let token = mint(serde_json::json!({ "sub": "a", "nbf": NOW }));
        assert_eq!(auth.verify(&token, NOW - 1), Err(AuthError::NotYetValid));
        let ctx = auth.verify(&token, NOW).unwrap();
        assert_eq!(ctx.expires_at, None);
    }

    #[test]
    fn wrong_secret_garbage_and_bad_claims_are_invalid() {
        let auth = Authenticator::hs256(SECRET);
        let other = mint_hs256(b"another secret", "mallory", NOW + 60);
        assert_eq!(
            auth.verify(&other, NOW),
            Err(AuthError::Invalid("signature does not verify".into()))
        );
        for garbage in ["garbage", "a.b.c", "a.b", "....", "\u{0}"] {
            assert!(is_invalid(auth.verify(garbage, NOW)), "{garbage:?}");
        }
        for claims in [
            serde_json::json!({ "sub": 7 }),
            serde_json::json!({ "sub": "" }),
            serde_json::json!({ "sub": "a", "exp": "soon" }),
            serde_json::json!({ "sub": "a", "exp": -1 }),
            serde_json::json!({ "sub": "a", "nbf": true }),
        ] {
            assert!(
                is_invalid(auth.verify(&mint(claims.clone()), NOW)),
                "{claims}"
            );
        }
    }

    #[test]
    fn uid_falls_back_to_user_id_and_a_client_token_must_name_one() {
        let auth = Authenticator::hs256(SECRET);
        let ctx = auth
            .verify(
                &mint(serde_json::json!({ "user_id": "bob", "aud": "x" })),
                NOW,
            )
            .unwrap();
        assert_eq!(ctx.uid.as_deref(), Some("bob"));
        // A token naming nobody would be `request.auth.uid == ""` to the rules.
        let err = auth.verify(&mint(serde_json::json!({})), NOW).unwrap_err();
        assert!(matches!(err, AuthError::Invalid(m) if m.contains("`sub`")));
        // A fractional exp counts from its whole second down.
        let token = mint(serde_json::json!({ "exp": NOW as f64 + 0.9 }));
        assert_eq!(
            auth.verify(&token, NOW).unwrap_err(),
            AuthError::Expired { expired_at: NOW }
        );
    }

    #[test]
    fn audience_and_issuer_are_checked_when_expected() {
        let auth =
            Authenticator::hs256(SECRET).expecting(Some("app-1"), Some("https://id.example"));
        let verify = |claims: Value| auth.verify(&mint(claims), NOW);
        let good = serde_json::json!({ "sub": "a", "aud": "app-1", "iss": "https://id.example" });
        assert!(verify(good).is_ok());
        let listed =
            serde_json::json!({ "sub": "a", "aud": ["x", "app-1"], "iss": "https://id.example" });
        assert!(verify(listed).is_ok());
        for bad in [
            serde_json::json!({ "sub": "a", "aud": "app-2", "iss": "https://id.example" }),
            serde_json::json!({ "sub": "a", "iss": "https://id.example" }),
            serde_json::json!({ "sub": "a", "aud": "app-1", "iss": "https://other.example" }),
            serde_json::json!({ "sub": "a", "aud": "app-1" }),
        ] {
            assert!(
                matches!(verify(bad.clone()), Err(AuthError::Invalid(_))),
                "{bad}"
            );
        }
        // Without expectations, neither is looked at.
        let plain = Authenticator::hs256(SECRET);
        assert!(plain
            .verify(
                &mint(serde_json::json!({ "sub": "a", "aud": "other" })),
                NOW
            )
            .is_ok());
    }

    #[test]
    fn databases_claim_limits_what_a_token_opens() {
        let auth = Authenticator::hs256(SECRET);
        let ctx = |claims: Value| auth.verify(&mint(claims), NOW);
        let none = ctx(serde_json::json!({ "sub": "a" })).unwrap();
        assert_eq!(none.databases, None);
        assert!(none.may_open("anything"));
        let list = ctx(serde_json::json!({ "sub": "a", "databases": ["a", "c"] })).unwrap();
        assert!(list.may_open("a") && list.may_open("c") && !list.may_open("b"));
        assert_eq!(
            list.database_denied("b").unwrap(),
            "this auth token may not open database `b`: its `databases` claim allows only [a, c]"
        );
        assert_eq!(list.database_denied("a"), None);
        let one = ctx(serde_json::json!({ "sub": "a", "databases": "a" })).unwrap();
        assert_eq!(one.databases, Some(vec!["a".to_owned()]));
        assert!(one.may_open("a") && !one.may_open("b"));
        let any = ctx(serde_json::json!({ "sub": "a", "databases": "*" })).unwrap();
        assert!(any.may_open("b"));
        let nothing = ctx(serde_json::json!({ "sub": "a", "databases": [] })).unwrap();
        assert!(!nothing.may_open("a"));
        for bad in [
            serde_json::json!({ "databases": 7 }),
            serde_json::json!({ "databases": ["a", 7] }),
            serde_json::json!({ "databases": { "a": true } }),
        ] {
            assert!(is_invalid(ctx(bad.clone())), "{bad}");
        }
        // Unverified claims are not trusted: with auth disabled nothing is limited.
        let open = Authenticator::disabled()
            .verify(&mint(serde_json::json!({ "databases": ["a"] })), NOW)
            .unwrap();
        assert!(open.may_open("b"));
    }

    #[test]
    fn empty_token_is_missing_when_enabled() {
        let auth = Authenticator::hs256(SECRET);
        assert_eq!(auth.verify("", NOW), Err(AuthError::Missing));
        assert_eq!(auth.verify("  ", NOW), Err(AuthError::Missing));
    }

    #[test]
    fn disabled_accepts_anything_and_trusts_nobody() {
        let auth = Authenticator::disabled();
        assert!(!auth.is_enabled());
        for token in ["", "garbage", &mint_hs256(SECRET, "alice", 1)] {
            assert_eq!(auth.verify(token, NOW), Ok(AuthContext::anonymous()));
        }
    }

    #[test]
    fn rs256_and_es256_public_keys_verify() {
        let auth = Authenticator::from_keys(
            None,
            Some(RS256_PUBLIC_PEM.as_bytes()),
            Some(ES256_PUBLIC_PEM.as_bytes()),
        )
        .unwrap();
        let ctx = auth.verify(RS256_TOKEN, NOW).unwrap();
        assert_eq!(ctx.uid.as_deref(), Some("rsa-user"));
        assert_eq!(ctx.expires_at, Some(4_102_444_800));
        assert_eq!(
            auth.verify(RS256_TOKEN, NOW - 1),
            Err(AuthError::NotYetValid)
        );
        let ctx = auth.verify(ES256_TOKEN, NOW).unwrap();
        assert_eq!(ctx.uid.as_deref(), Some("ec-user"));

        // A tampered payload (another sub) no longer verifies.
        let mut parts: Vec<&str> = RS256_TOKEN.split('.').collect();
        let forged_payload = "eyJzdWIiOiJhZG1pbiIsImV4cCI6NDEwMjQ0NDgwMH0";
        parts[1] = forged_payload;
        assert!(is_invalid(auth.verify(&parts.join("."), NOW)));

        // No HS256 key is configured, so an HS256 token is refused whatever its key.
        assert_eq!(
            auth.verify(&mint_hs256(SECRET, "a", NOW + 1), NOW),
            Err(AuthError::Invalid(
                "algorithm HS256 is not accepted by this relay".into()
            ))
        );
        // The algorithm-confusion attack: HS256 signed with the RSA public key as secret.
        let confused = mint_hs256(RS256_PUBLIC_PEM.as_bytes(), "admin", NOW + 1);
        assert!(is_invalid(auth.verify(&confused, NOW)));
    }

    #[test]
    fn any_configured_key_may_verify() {
        let auth = Authenticator::from_keys(Some(SECRET), Some(RS256_PUBLIC_PEM.as_bytes()), None)
            .unwrap();
        assert!(auth.verify(RS256_TOKEN, NOW).is_ok());
        assert!(auth.verify(&mint_hs256(SECRET, "a", NOW + 1), NOW).is_ok());
        // Only the RSA key is configured for RS256, so the ES256 token is refused.
        assert!(is_invalid(auth.verify(ES256_TOKEN, NOW)));
    }

    #[test]
    fn bad_configuration_is_an_error() {
        assert!(matches!(
            Authenticator::from_keys(None, None, None),
            Err(AuthConfigError::NoKeys)
        ));
        assert!(matches!(
            Authenticator::from_keys(Some(b""), None, None),
            Err(AuthConfigError::EmptySecret)
        ));
        assert!(matches!(
            Authenticator::from_keys(None, Some(b"not a pem"), None),
            Err(AuthConfigError::BadKey {
                algorithm: "RS256",
                ..
            })
        ));
        // An EC key where an RSA key belongs, and the other way round.
        assert!(matches!(
            Authenticator::from_keys(None, Some(ES256_PUBLIC_PEM.as_bytes()), None),
            Err(AuthConfigError::BadKey {
                algorithm: "RS256",
                ..
            })
        ));
        assert!(matches!(
            Authenticator::from_keys(None, None, Some(RS256_PUBLIC_PEM.as_bytes())),
            Err(AuthConfigError::BadKey {
                algorithm: "ES256",
                ..
            })
        ));
        let missing = Path::new("/nonexistent/hearth/key.pem");
        let err = read_key_file(missing).unwrap_err();
        assert!(matches!(err, AuthConfigError::KeyFile { .. }));
        assert!(err
            .to_string()
            .starts_with("cannot read auth key file /nonexistent"));
    }
}
