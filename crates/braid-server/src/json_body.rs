//! The JSON body extractor every POST route uses, so that a body that is too large (413),
//! of the wrong content type (415), not JSON, or of the wrong shape (400) gets OpenAI's error
//! JSON with serde's message naming the field, never axum's plain-text 422.
//!
//! Fields the body type does not declare are checked by `request_fields` (nothing is
//! silently ignored).
//!
//! A missing `Content-Type` is accepted as JSON (curl users forget it; the body decides).

use crate::error::ApiError;
use crate::request_fields::{self, RequestFields};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};

pub struct ApiJson<T>(pub T);

fn is_json(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

impl<T: RequestFields> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("");
            if !is_json(ct) {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "invalid_request_error",
                    format!("the request body must be JSON; got Content-Type `{ct}`, send `Content-Type: application/json`"),
                ));
            }
        }
        let limit = state.max_body_bytes;
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError::from_bytes_rejection(r, limit))?;
        let axum::Json(value) =
            axum::Json::<T>::from_bytes(&bytes).map_err(ApiError::from_json_rejection)?;
        request_fields::check::<T>(&bytes)?;
        Ok(ApiJson(value))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_content_types() {
        assert!(super::is_json("application/json"));
        assert!(super::is_json("application/json; charset=utf-8"));
        assert!(super::is_json("application/vnd.api+json"));
        assert!(!super::is_json("text/plain"));
        assert!(!super::is_json("application/x-www-form-urlencoded"));
    }
}
