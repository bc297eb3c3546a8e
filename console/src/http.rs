//! What every handler's answer is made of: JSON replies, blocking mailbox work off the async
//! threads, the JSON body check.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::app::Root;
use crate::auth;

/// JSON with a status.
pub(crate) fn reply(status: StatusCode, v: &Value) -> Response {
    let mut resp = (status, v.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Runs blocking mailbox work on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        auth::refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("internal error: {e}"),
        )
    })
}

/// True when the request says its body is JSON (`Content-Type: application/json`, with or
/// without parameters): what a form of another site cannot send without a preflight.
fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim() == "application/json")
}

/// The root at `index` of those the console serves, else why not (how many it serves).
pub(crate) fn root_at(roots: &[Root], index: usize) -> Result<&Root, String> {
    roots.get(index).ok_or_else(|| {
        format!(
            "root {index}: no such root (the console serves {})",
            roots.len()
        )
    })
}

/// The JSON body of a state-changing request, `what` naming it in the refusals: 415 unless it
/// says `Content-Type: application/json`, 400 unless it is JSON.
pub(crate) fn json_of(
    headers: &HeaderMap,
    body: &[u8],
    what: &str,
) -> Result<Value, (StatusCode, String)> {
    if !json_body(headers) {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("{what} is a JSON object: Content-Type: application/json"),
        ));
    }
    serde_json::from_slice(body).map_err(|e| (StatusCode::BAD_REQUEST, format!("not JSON: {e}")))
}
