//! The routes: the page and its files (inside the binary), and the JSON API
//! (spec/console.md). Every route is behind [`auth::guard`].

use std::convert::Infallible;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{Value, json};
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::app::Shared;
use crate::http::{blocking, json_of, reply, root_at};
use crate::{asks, auth, events, ids, send, state};

/// The largest request body taken: a message up to the file cap, and its JSON escapes.
const MAX_BODY: usize = 4 << 20;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const TIMELINE_JS: &str = include_str!("assets/timeline.js");
const APP_CSS: &str = include_str!("assets/app.css");
const ICON_SVG: &str = include_str!("assets/icon.svg");

/// The console's routes, with the guard in front of every one.
pub(crate) fn router(c: Shared) -> Router {
    Router::new()
        .route("/", get(|| asset(INDEX_HTML, "text/html; charset=utf-8")))
        .route(
            "/app.js",
            get(|| asset(APP_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/timeline.js",
            get(|| asset(TIMELINE_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/app.css",
            get(|| asset(APP_CSS, "text/css; charset=utf-8")),
        )
        .route("/icon.svg", get(|| asset(ICON_SVG, "image/svg+xml")))
        .route("/api/state", get(get_state))
        .route("/api/send", post(post_send))
        .route("/api/events", get(get_events))
        .route("/api/signals/{id}", get(get_signal))
        .route("/api/asks/{id}/answer", post(asks::post_answer))
        .fallback(|| async { auth::refusal(StatusCode::NOT_FOUND, "no such page") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(c.clone(), auth::guard))
        .with_state(c)
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut resp = body.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    resp
}

async fn get_state(State(c): State<Shared>) -> Response {
    let seq = events::last_seq();
    match blocking(move || state::snapshot(&c.roots, seq)).await {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(r) => r,
    }
}

async fn post_send(State(c): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let v = match json_of(&headers, &body, "a send") {
        Ok(v) => v,
        Err((status, why)) => return auth::refusal(status, &why),
    };
    let req = match send::parse(&v) {
        Ok(r) => r,
        Err(why) => return auth::refusal(StatusCode::BAD_REQUEST, &why),
    };
    let root = match root_at(&c.roots, req.root) {
        Ok(root) => root,
        Err(why) => return auth::refusal(StatusCode::BAD_REQUEST, &why),
    };
    let (path, opts) = (root.path.clone(), root.opts.clone());
    let index = req.root;
    // A fresh handle, as `sigbox send` opens one (see `Root::fresh`): a signal goes to the
    // `inputs/` there now, never to one moved away.
    match blocking(move || opts.open(&path).and_then(|mb| mb.send(&req.signal))).await {
        Ok(Ok(id)) => reply(StatusCode::OK, &json!({"id": id, "root": index})),
        Ok(Err(e)) => {
            let status = if e.kind() == sigbox::ErrorKind::Io {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::BAD_REQUEST
            };
            auth::refusal(status, &send::library_refusal(&e))
        }
        Err(r) => r,
    }
}

/// Server-Sent Events: `hello` with the last change's number, then one `change` per change
/// (a client too slow to keep up is told to read the state again: a `rescan`).
async fn get_events(State(c): State<Shared>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = c.changes.subscribe();
    let hello = Event::default()
        .event("hello")
        .data(json!({"seq": events::last_seq()}).to_string());
    let changes = BroadcastStream::new(rx).map(|r| {
        Ok(match r {
            Ok(ch) => Event::default()
                .event("change")
                .id(ch.seq.to_string())
                .data(serde_json::to_string(&ch).unwrap_or_default()),
            Err(BroadcastStreamRecvError::Lagged(n)) => Event::default()
                .event("change")
                .data(json!({"kind": "rescan", "lagged": n}).to_string()),
        })
    });
    Sse::new(stream::once(async move { Ok(hello) }).chain(changes)).keep_alive(KeepAlive::default())
}

/// The query of `/api/signals/<id>`.
#[derive(serde::Deserialize)]
struct RootQuery {
    root: Option<usize>,
}

/// One signal, pending or processed, whole: every field of its file.
async fn get_signal(
    State(c): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<RootQuery>,
) -> Response {
    if let Err(why) = ids::check(&id) {
        return auth::refusal(StatusCode::BAD_REQUEST, &why);
    }
    let index = q.root.unwrap_or(0);
    let Some(root) = c.roots.get(index) else {
        return auth::refusal(
            StatusCode::BAD_REQUEST,
            &format!("root {index}: no such root"),
        );
    };
    let mb = root.mb.clone();
    let found = blocking(move || -> sigbox::Result<Option<Value>> {
        for p in mb.pending()? {
            if p.id == id {
                return Ok(mb.peek(&p)?.map(|s| signal_json(&s, "pending")));
            }
        }
        for s in mb.processed()?.into_iter().flatten() {
            if s.id == id {
                return Ok(Some(signal_json(&s, "processed")));
            }
        }
        Ok(None)
    })
    .await;
    match found {
        Ok(Ok(Some(v))) => reply(StatusCode::OK, &v),
        Ok(Ok(None)) => auth::refusal(StatusCode::NOT_FOUND, "no signal with this id"),
        Ok(Err(e)) => auth::refusal(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        Err(r) => r,
    }
}

fn signal_json(s: &sigbox::Signal, place: &str) -> Value {
    json!({
        "id": s.id, "place": place, "type": s.signal_type.as_str(),
        "target": match &s.target { sigbox::Target::None => Value::Null, t => json!(t.to_string()) },
        "from": s.from, "message": s.message, "iteration": s.iteration,
        "created_at": s.created_at_rfc3339(), "fields": s.fields,
    })
}
