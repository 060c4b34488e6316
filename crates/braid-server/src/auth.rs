//! API keys: who may call the server.
//!
//! With `--api-key` (or `BRAID_API_KEY`), every route needs `Authorization: Bearer KEY` (or
//! `x-api-key: KEY`, as Anthropic's clients send it) except the few that are open on purpose: `/health` (probes), `/get_load` (vllm-router polls
//! it without a key, and it holds two counts that /metrics also shows), `/metrics` (scrapers; closed
//! too with `--protect-metrics`), `/dashboard` (a static page that holds no data) and
//! `/openapi.json` (the public contract). The allowlist is of open routes, so a route added
//! later is protected unless someone opens it here.
//!
//! `/debug/steps` alone also takes the key as `?api_key=KEY`, because the dashboard reads it
//! with the browser's `EventSource`, which cannot send headers: open
//! `/dashboard?api_key=KEY` and the page passes its query string on to the feed.
//!
//! Keys are compared in time that depends only on the length of what the client sent, never
//! on how much of it matched, and every configured key is compared on every request. Keys
//! never reach a log: `ApiKey`'s `Debug` hides them, no error message repeats the presented
//! value, and the request log records the path without the query string.

use crate::error::ApiError;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::str::FromStr;
use subtle::{Choice, ConstantTimeEq};

/// Routes anyone may call, keys or not (`/metrics` only without `--protect-metrics`).
const OPEN_ROUTES: &[&str] = &["/health", "/get_load", "/dashboard", "/openapi.json"];

/// The one route that also accepts the key in its query string (for `EventSource`).
const QUERY_KEY_ROUTE: &str = "/debug/steps";

/// An API key. Its `Debug` never shows it, so logging the parsed flags cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<hidden>)")
    }
}

impl FromStr for ApiKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let key = s.trim();
        if key.is_empty() {
            return Err("an API key must not be empty (to run without keys, unset BRAID_API_KEY and leave out --api-key)".into());
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "an API key must be printable ASCII without spaces (it travels in an HTTP header)"
                    .into(),
            );
        }
        Ok(ApiKey(key.to_string()))
    }
}

/// Which keys the server accepts, and on which routes.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    keys: Vec<ApiKey>,
    protect_metrics: bool,
}

impl Auth {
    pub fn new(keys: Vec<ApiKey>, protect_metrics: bool) -> Self {
        Self {
            keys,
            protect_metrics,
        }
    }

    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether a request to `path` must carry a key.
    pub fn protects(&self, path: &str) -> bool {
        if !self.enabled() || OPEN_ROUTES.contains(&path) {
            return false;
        }
        path != "/metrics" || self.protect_metrics
    }

    /// Whether `presented` is one of the keys. Every key is compared, in constant time,
    /// whichever matches.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        self.accepts_counting(presented, &mut |_| {})
    }

    fn accepts_counting(&self, presented: &[u8], on_compare: &mut dyn FnMut(usize)) -> bool {
        let mut matched = Choice::from(0);
        for (i, key) in self.keys.iter().enumerate() {
            on_compare(i);
            matched |= matches(presented, key.as_bytes());
        }
        matched.into()
    }
}

/// Whether `presented` equals `key`, in time that depends only on `presented.len()`.
pub fn constant_time_eq(presented: &[u8], key: &[u8]) -> bool {
    matches(presented, key).into()
}

/// `subtle` compares equal-length slices in constant time but returns at once when the lengths
/// differ, which would tell a client when it has guessed the key's length. So `presented` is
/// compared against the key repeated to its own length, and the lengths separately.
fn matches(presented: &[u8], key: &[u8]) -> Choice {
    if key.is_empty() {
        return Choice::from(0);
    }
    let same_len = (presented.len() as u64).ct_eq(&(key.len() as u64));
    presented.ct_eq(&repeated(key, presented.len())) & same_len
}

/// `key` repeated, or cut, to `len` bytes.
fn repeated(key: &[u8], len: usize) -> Vec<u8> {
    key.iter().cycle().take(len).copied().collect()
}

/// What a request presented as its key.
enum Presented<'a> {
    Nothing,
    /// An `Authorization` header that is not `Bearer <key>`.
    Malformed,
    Key(&'a [u8]),
}

fn presented_header(headers: &HeaderMap) -> Presented<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return match headers.get("x-api-key").map(|v| v.as_bytes().trim_ascii()) {
            Some([]) => Presented::Malformed,
            Some(key) => Presented::Key(key),
            None => Presented::Nothing,
        };
    };
    let bytes = value.as_bytes();
    match bytes.iter().position(|&b| b == b' ') {
        Some(n) if bytes[..n].eq_ignore_ascii_case(b"bearer") => {
            let key = bytes[n..].trim_ascii();
            if key.is_empty() {
                Presented::Malformed
            } else {
                Presented::Key(key)
            }
        }
        _ => Presented::Malformed,
    }
}

/// `?api_key=` on the query-key route.
fn query_key(uri: &Uri) -> Option<String> {
    let Query(q) = Query::<HashMap<String, String>>::try_from_uri(uri).ok()?;
    q.get("api_key").cloned()
}

pub fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
        .with_code("invalid_api_key")
}

/// The middleware: lets a request through when its route is open or its key is right,
/// otherwise answers 401 in OpenAI's error JSON with `WWW-Authenticate: Bearer`.
pub async fn require_key(
    State(auth): State<std::sync::Arc<Auth>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if !auth.protects(path) {
        return next.run(req).await;
    }
    let from_query = (path == QUERY_KEY_ROUTE)
        .then(|| query_key(req.uri()))
        .flatten();
    let verdict = match (presented_header(req.headers()), &from_query) {
        (Presented::Key(k), _) => Ok(auth.accepts(k)),
        (Presented::Malformed, _) => Err(
            "the Authorization header must be `Bearer YOUR_KEY` (or send `x-api-key: YOUR_KEY`)",
        ),
        (Presented::Nothing, Some(k)) => Ok(auth.accepts(k.as_bytes())),
        (Presented::Nothing, None) => Err(
            "this server needs an API key: send it in an Authorization header using Bearer auth (`Authorization: Bearer YOUR_KEY`) or as `x-api-key: YOUR_KEY`",
        ),
    };
    let message = match verdict {
        Ok(true) => return next.run(req).await,
        Ok(false) => "incorrect API key provided",
        Err(m) => m,
    };
    let mut resp = unauthorized(message).into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"sk-braid-0123456789abcdef";

    #[test]
    fn the_key_matches_and_one_wrong_byte_anywhere_does_not() {
        assert!(constant_time_eq(KEY, KEY));
        let n = KEY.len();
        for pos in [0, n / 2, n - 1] {
            let mut wrong = KEY.to_vec();
            wrong[pos] ^= 0x01;
            assert!(!constant_time_eq(&wrong, KEY), "mismatch at {pos}");
        }
        assert!(!constant_time_eq(&vec![b'x'; n], KEY), "every byte wrong");
    }

    #[test]
    fn a_prefix_or_repetition_of_the_key_does_not_match() {
        let n = KEY.len();
        for len in [0, 1, n - 1, n + 1, 3 * n] {
            let presented = repeated(KEY, len);
            assert!(!constant_time_eq(&presented, KEY), "length {len}");
        }
    }

    #[test]
    fn the_comparison_runs_over_the_presented_length_whatever_the_key_length() {
        let n = KEY.len();
        for len in [0, 1, n - 1, n, n + 1, 3 * n] {
            assert_eq!(repeated(KEY, len).len(), len);
        }
    }

    #[test]
    fn an_empty_key_matches_nothing() {
        assert!(!constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"x", b""));
    }

    #[test]
    fn every_key_is_compared_whichever_matches() {
        let keys: Vec<ApiKey> = ["first-key", "second-key", "third-key"]
            .iter()
            .map(|k| k.parse().unwrap())
            .collect();
        let auth = Auth::new(keys, false);
        for presented in ["first-key", "third-key", "wrong-key", ""] {
            let mut compared = vec![];
            let ok = auth.accepts_counting(presented.as_bytes(), &mut |i| compared.push(i));
            assert_eq!(ok, presented.ends_with("-key") && presented != "wrong-key");
            assert_eq!(compared, vec![0, 1, 2], "{presented}");
        }
    }

    #[test]
    fn open_and_protected_routes() {
        let key: ApiKey = "k".parse().unwrap();
        let open = Auth::default();
        assert!(!open.protects("/v1/completions"));
        let auth = Auth::new(vec![key.clone()], false);
        for p in [
            "/v1/completions",
            "/v1/chat/completions",
            "/v1/models",
            "/v1/models/x",
            "/tokenize",
            "/detokenize",
            "/debug/steps",
            "/no/such/route",
        ] {
            assert!(auth.protects(p), "{p}");
        }
        for p in ["/health", "/metrics", "/dashboard", "/openapi.json"] {
            assert!(!auth.protects(p), "{p}");
        }
        assert!(Auth::new(vec![key], true).protects("/metrics"));
    }

    #[test]
    fn keys_parse_and_never_print() {
        let k: ApiKey = " secret-1 ".parse().unwrap();
        assert_eq!(k.as_bytes(), b"secret-1");
        assert!(!format!("{k:?}").contains("secret"));
        assert!("".parse::<ApiKey>().is_err());
        assert!("two words".parse::<ApiKey>().is_err());
    }

    #[test]
    fn bearer_header_forms() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            m
        };
        let key = |m: &HeaderMap| match presented_header(m) {
            Presented::Key(k) => Some(String::from_utf8(k.to_vec()).unwrap()),
            _ => None,
        };
        assert_eq!(key(&h("Bearer abc")).as_deref(), Some("abc"));
        assert_eq!(key(&h("bearer  abc ")).as_deref(), Some("abc"));
        assert_eq!(key(&h("Basic abc")), None);
        assert_eq!(key(&h("Bearer ")), None);
        assert_eq!(key(&h("abc")), None);
        let x = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert("x-api-key", HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(key(&x("abc")).as_deref(), Some("abc"));
        assert!(matches!(presented_header(&x(" ")), Presented::Malformed));
        assert!(matches!(
            presented_header(&HeaderMap::new()),
            Presented::Nothing
        ));
        let uri: Uri = "/debug/steps?x=1&api_key=a%2Bb".parse().unwrap();
        assert_eq!(query_key(&uri).as_deref(), Some("a+b"));
    }
}
