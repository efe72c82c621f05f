//! JSON error responses, and the JSON body extractor whose errors name the bad field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// An error answered as `{"error": message, "field": path-or-null}` with an HTTP status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, as a path (`labels[3]`, `files.a.txt`).
    pub field: Option<String>,
    /// Seconds for a `Retry-After` header (503).
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    field: Option<&'a str>,
}

impl ApiError {
    /// An error with no field.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 422 about `field`.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: message.into(),
            field: Some(field.into()),
            retry_after: None,
        }
    }

    /// 503 with `Retry-After`.
    pub fn overloaded(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            field: None,
            retry_after: Some(1),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: &self.message,
            field: self.field.as_deref(),
        };
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

/// A JSON body. Unlike `axum::Json` it does not insist on a content type (OpenRLHF sets one;
/// curl users often forget), and its errors are JSON naming the field: malformed JSON is 400,
/// a missing field or a wrong type 422 (with the path found by `serde_path_to_error`), a body
/// over the limit 413.
pub struct ApiJson<T>(pub T);

/// Bodies larger than this are parsed on tokio's blocking pool, not on an async worker (a
/// multi-megabyte body takes milliseconds to seconds to parse; issue 24, finding 9).
pub const PARSE_INLINE_BYTES: usize = 64 << 10;

impl<S: Send + Sync, T: DeserializeOwned + Send + 'static> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let (status, message) = body_rejection(&r);
            ApiError::new(status, message)
        })?;
        if bytes.len() <= PARSE_INLINE_BYTES {
            return parse(&bytes).map(ApiJson);
        }
        tokio::task::spawn_blocking(move || {
            let parsed = parse(&bytes);
            let len = bytes.len();
            drop(bytes);
            crate::heap::trim_after(len);
            parsed
        })
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "parsing failed"))?
        .map(ApiJson)
    }
}

/// The status and message of a body that could not be read (413 names the flag that sets the
/// limit); every JSON extractor of the server answers it the same way.
pub fn body_rejection(r: &axum::extract::rejection::BytesRejection) -> (StatusCode, String) {
    let status = r.status();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "request body is larger than the server's limit (--max-body-bytes)".to_string()
    } else {
        r.body_text()
    };
    (status, message)
}

/// Parses `bytes` as JSON into `T`, naming the failing field.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
                let msg = inner.to_string();
                ApiError::field(field_name(&path, &msg), msg)
            }
            _ => ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("malformed JSON body: {inner}"),
            ),
        }
    })?;
    Ok(value)
}

/// The field a data error is about: the path, plus the name in "missing field `x`" (serde
/// reports a missing field at its parent's path).
fn field_name(path: &str, msg: &str) -> String {
    let missing = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next());
    match (path, missing) {
        (".", Some(m)) => m.to_string(),
        (p, Some(m)) => format!("{p}.{m}"),
        (p, None) => p.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct R {
        query: Vec<String>,
        inner: Option<Inner>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        x: u32,
    }

    #[test]
    fn errors_name_fields() {
        let e = parse::<R>(br#"{"query": ["a", 3]}"#).unwrap_err();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.field.as_deref(), Some("query[1]"));
        let e = parse::<R>(br#"{"inner": {"x": 1}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("query"), "{}", e.message);
        let e = parse::<R>(br#"{"query": [], "inner": {}}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("inner.x"), "{}", e.message);
        let e = parse::<R>(br#"{"query": ["#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.field, None);
    }
}
