//! Bearer-key authentication (OpenAI's convention: `Authorization: Bearer KEY`).
//!
//! Three classes of route:
//! - open: `GET /health` (load balancers and readiness probes send no key);
//! - admin: what changes or observes the server rather than using it: weight loads
//!   (`/update_weights_from_disk`), pausing and resuming (which abort other clients' requests:
//!   `/pause_generation`, `/continue_generation`, `/pause`, `/resume`) and `/metrics`;
//! - every other route (generation, rewards, verification, code execution, and any unknown path,
//!   so a client without a key cannot tell which routes exist): the API key.
//!
//! `--admin-key` guards the admin routes; without one, the API key guards them too (a single
//! key, as vLLM's `--api-key`). The admin key is also accepted on every API route. Without
//! `--api-key` the API routes are open (an admin key alone guards only the admin routes, as
//! SGLang's `--admin-api-key`). A server with no key at all serves everyone (the default on loopback; refused elsewhere unless
//! `--insecure-no-auth`, see [`crate::ServeArgs::check_exposure`]). A missing or wrong key is a
//! 401 in OpenAI's error shape with `WWW-Authenticate: Bearer`.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::policy::error::OpenAiError;
use std::sync::Arc;

/// The keys a server was started with.
#[derive(Clone, Default)]
pub struct Keys {
    pub api: Option<String>,
    pub admin: Option<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("api", &self.api.as_ref().map(|_| "<set>"))
            .field("admin", &self.admin.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Which key a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Nothing,
    Api,
    Admin,
}

/// The routes of the admin class.
pub const ADMIN_ROUTES: &[&str] = &[
    "/update_weights_from_disk",
    "/pause_generation",
    "/continue_generation",
    "/pause",
    "/resume",
    "/metrics",
];

/// The class of `path`.
pub fn need(path: &str) -> Need {
    if path == "/health" {
        Need::Nothing
    } else if ADMIN_ROUTES.contains(&path) {
        Need::Admin
    } else {
        Need::Api
    }
}

/// Byte comparison whose time does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Keys {
    /// Whether any key is set.
    pub fn any(&self) -> bool {
        self.api.is_some() || self.admin.is_some()
    }

    /// Whether `presented` (the bearer token, if any) opens a route of class `need`.
    pub fn allows(&self, need: Need, presented: Option<&str>) -> bool {
        let is = |k: &Option<String>| match (k, presented) {
            (Some(k), Some(p)) => same(k.as_bytes(), p.as_bytes()),
            _ => false,
        };
        match need {
            Need::Nothing => true,
            Need::Api => self.api.is_none() || is(&self.api) || is(&self.admin),
            Need::Admin => match &self.admin {
                Some(_) => is(&self.admin),
                None => self.api.is_none() || is(&self.api),
            },
        }
    }
}

/// The token of `Authorization: Bearer TOKEN` (scheme case-insensitive, as RFC 6750 allows),
/// or else of `X-API-Key: TOKEN` (the header the Tinker SDK sends its key in,
/// `tinker/lib/_auth_token_provider.py`).
fn bearer(req: &Request) -> Option<&str> {
    let from_authorization = || {
        let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    };
    from_authorization().or_else(|| {
        let v = req.headers().get("x-api-key")?.to_str().ok()?;
        Some(v.trim())
    })
}

/// Middleware on the whole router: 401 unless the request carries the key its route needs.
pub async fn check(State(keys): State<Arc<Keys>>, req: Request, next: Next) -> Response {
    let need = need(req.uri().path());
    if keys.allows(need, bearer(&req)) {
        return next.run(req).await;
    }
    let message = match (need, bearer(&req).is_some()) {
        (Need::Admin, true) if keys.admin.is_some() => {
            "this route needs the server's admin key (--admin-key) in `Authorization: Bearer KEY`"
        }
        (_, true) => "incorrect API key in `Authorization: Bearer KEY`",
        (_, false) => {
            "missing API key: send `Authorization: Bearer KEY` (the server was started with --api-key)"
        }
    };
    let mut resp = OpenAiError::status(StatusCode::UNAUTHORIZED, message).into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(api: Option<&str>, admin: Option<&str>) -> Keys {
        Keys {
            api: api.map(String::from),
            admin: admin.map(String::from),
        }
    }

    #[test]
    fn classes() {
        assert_eq!(need("/health"), Need::Nothing);
        assert_eq!(need("/metrics"), Need::Admin);
        assert_eq!(need("/update_weights_from_disk"), Need::Admin);
        assert_eq!(need("/v1/completions"), Need::Api);
        assert_eq!(need("/no/such/route"), Need::Api);
    }

    #[test]
    fn key_from_either_header() {
        let req = |name: &str, value: &str| {
            Request::builder()
                .header(name, value)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(bearer(&req("authorization", "Bearer k1")), Some("k1"));
        assert_eq!(bearer(&req("x-api-key", "tml-k2")), Some("tml-k2"));
        assert_eq!(bearer(&req("authorization", "Basic k1")), None);
        let both = Request::builder()
            .header("authorization", "Bearer k1")
            .header("x-api-key", "k2")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(bearer(&both), Some("k1"), "Authorization wins");
    }

    #[test]
    fn who_gets_in() {
        let open = keys(None, None);
        assert!(open.allows(Need::Api, None) && open.allows(Need::Admin, None));
        let one = keys(Some("k"), None);
        assert!(!one.allows(Need::Api, None));
        assert!(!one.allows(Need::Api, Some("x")));
        assert!(!one.allows(Need::Api, Some("kk")));
        assert!(one.allows(Need::Api, Some("k")));
        assert!(
            one.allows(Need::Admin, Some("k")),
            "without an admin key, the API key guards admin routes"
        );
        assert!(one.allows(Need::Nothing, None));
        let two = keys(Some("k"), Some("a"));
        assert!(!two.allows(Need::Admin, Some("k")));
        assert!(two.allows(Need::Admin, Some("a")));
        assert!(
            two.allows(Need::Api, Some("a")),
            "the admin key opens API routes"
        );
        let admin_only = keys(None, Some("a"));
        assert!(
            admin_only.allows(Need::Api, None),
            "no API key: the API routes are open"
        );
        assert!(!admin_only.allows(Need::Admin, None));
        assert!(admin_only.allows(Need::Admin, Some("a")));
    }
}
