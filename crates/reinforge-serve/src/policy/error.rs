//! Errors in OpenAI's JSON shape, `{"error": {"message", "type", "param", "code"}}`, which the
//! official clients raise as typed exceptions (`BadRequestError`, `NotFoundError`, ...). The
//! `type` names and the integer `code` follow vLLM's `create_error_response`
//! (vllm/entrypoints/openai/serving_engine.py); `param` names the request field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

/// An OpenAI-shaped error with its HTTP status.
#[derive(Debug)]
pub struct OpenAiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault (`prompt[1][3]`, `max_tokens`).
    pub param: Option<String>,
    /// Seconds for a `Retry-After` header (503).
    pub retry_after: Option<u64>,
}

impl OpenAiError {
    /// 400 about `param`.
    pub fn bad(param: impl Into<String>, message: impl Into<String>) -> Self {
        OpenAiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.into()),
            retry_after: None,
        }
    }

    /// An error with a status and no field.
    pub fn status(status: StatusCode, message: impl Into<String>) -> Self {
        OpenAiError {
            status,
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }

    /// The same error about `param`.
    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// 404 for a model this server does not serve.
    pub fn unknown_model(asked: &str, served: &str) -> Self {
        OpenAiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{asked}` does not exist; this server serves `{served}`"),
            param: Some("model".into()),
            retry_after: None,
        }
    }

    /// 503 with `Retry-After: 1`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        OpenAiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            param: None,
            retry_after: Some(1),
        }
    }

    fn type_name(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "BadRequestError",
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::UNAUTHORIZED => "AuthenticationError",
            StatusCode::FORBIDDEN => "PermissionDeniedError",
            StatusCode::REQUEST_TIMEOUT => "RequestTimeoutError",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestTooLargeError",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
            _ => "InternalServerError",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {
            "message": self.message,
            "type": self.type_name(),
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl From<crate::error::ApiError> for OpenAiError {
    /// Body errors of [`crate::error::parse`]: a wrong type or a missing field (422 there) is a
    /// 400 here, as in OpenAI's and vLLM's servers.
    fn from(e: crate::error::ApiError) -> Self {
        let status = if e.status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            e.status
        };
        OpenAiError {
            status,
            message: e.message,
            param: e.field,
            retry_after: e.retry_after,
        }
    }
}

/// A JSON body whose errors are OpenAI-shaped and name the field.
pub struct OaiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for OaiJson<T> {
    type Rejection = OpenAiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, OpenAiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let (status, message) = crate::error::body_rejection(&r);
            OpenAiError::status(status, message)
        })?;
        // An empty body is an empty object (SGLang's and vLLM's control routes accept none).
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        Ok(OaiJson(crate::error::parse(bytes)?))
    }
}
