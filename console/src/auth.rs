//! Who may talk to the console (spec/console.md, "Security"): every request passes here first.
//!
//! In order: the `Host` header must name the address the console listens on (a page of
//! another site that resolves its own name to 127.0.0.1, DNS rebinding, is refused); the page
//! `/?token=T` trades the token for a cookie (HttpOnly, SameSite=Strict) and redirects to `/`
//! so that the token leaves the address bar and the history; every other request carries the
//! token, in that cookie or as `Authorization: Bearer T` (401 without, 403 when wrong; compared
//! in constant time); a request that changes something (any method but GET and HEAD) from a
//! browser must come from the console's own origin (`Origin`, `Sec-Fetch-Site`: CSRF), and one
//! with no `Origin` at all must carry the token as `Authorization`, which no other site can
//! make a browser send. Every answer, refusals included, carries the headers of
//! [`secure_headers`].

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::app::Shared;

/// The Content Security Policy of every answer: nothing but the console's own files, no
/// inline script or style, never inside a frame.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// A new access token: 256 bits from the operating system, as 64 hex digits.
pub(crate) fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot draw a random token from the system: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// True when `given` is the token; the time taken does not depend on where they differ.
fn is_token(c: &Shared, given: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(c.token.as_bytes()))
}

/// What a request that passed the checks goes on to.
enum Pass {
    /// The handler.
    Go,
    /// `/?token=T` with the right token: the cookie, and a redirect to `/`.
    Trade,
}

/// The middleware: checks, then the handler; the security headers on every answer.
pub(crate) async fn guard(State(c): State<Shared>, req: Request, next: Next) -> Response {
    let mut resp = match check(&c, &req) {
        Ok(Pass::Go) => next.run(req).await,
        Ok(Pass::Trade) => trade(&c),
        Err((status, why)) => refusal(status, &why),
    };
    secure_headers(resp.headers_mut());
    resp
}

/// The checks of the module's documentation, in its order.
fn check(c: &Shared, req: &Request) -> Result<Pass, (StatusCode, String)> {
    let h = req.headers();
    if h.get_all(header::HOST).iter().count() > 1 {
        return Err((
            StatusCode::FORBIDDEN,
            "more than one Host header".to_string(),
        ));
    }
    let host = header_text(h, header::HOST)
        .ok_or((StatusCode::FORBIDDEN, "no Host header".to_string()))?
        .to_ascii_lowercase();
    let ip_literal = || {
        host.parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.port() == c.listen.port())
    };
    if !(c.hosts.contains(&host) || (c.any_ip && ip_literal())) {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "Host {host:?} is not this console's address (it answers to {}): refused, as a \
                 page of another site would be",
                c.hosts.join(", ")
            ),
        ));
    }
    // A request line in absolute form names its own host: it must be the same.
    if let Some(a) = req.uri().authority()
        && !a.as_str().eq_ignore_ascii_case(&host)
    {
        return Err((
            StatusCode::FORBIDDEN,
            format!("the request names another host ({a}) than its Host header"),
        ));
    }
    if req.uri().path() == "/"
        && let Some(t) = query_token(req.uri().query())
    {
        return if is_token(c, t) {
            Ok(Pass::Trade)
        } else {
            Err((StatusCode::FORBIDDEN, "wrong token".to_string()))
        };
    }
    let bearer = header_text(h, header::AUTHORIZATION).map(|a| {
        a.strip_prefix("Bearer ")
            .or_else(|| a.strip_prefix("bearer "))
            .unwrap_or("")
            .trim()
    });
    let given = bearer.or_else(|| cookie(h, &c.cookie));
    match given {
        None => {
            return Err((
                StatusCode::UNAUTHORIZED,
                "no token: open the address the console printed (with ?token=), or send \
                 Authorization: Bearer <token>"
                    .to_string(),
            ));
        }
        Some(t) if !is_token(c, t) => {
            return Err((StatusCode::FORBIDDEN, "wrong token".to_string()));
        }
        Some(_) => {}
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let ours = format!("http://{host}");
        match header_text(h, header::ORIGIN) {
            Some(o) if o.eq_ignore_ascii_case(&ours) => {}
            Some(o) => {
                return Err((
                    StatusCode::FORBIDDEN,
                    format!("cross-origin request from {o:?} refused (the console is {ours})"),
                ));
            }
            None if bearer.is_none() => {
                return Err((
                    StatusCode::FORBIDDEN,
                    "a change with no Origin header must carry Authorization: Bearer <token>"
                        .to_string(),
                ));
            }
            None => {}
        }
        if let Some(site) = header_text(h, "sec-fetch-site")
            && site != "same-origin"
            && site != "none"
        {
            return Err((
                StatusCode::FORBIDDEN,
                format!("cross-site request refused (Sec-Fetch-Site: {site})"),
            ));
        }
    }
    Ok(Pass::Go)
}

/// A header's value as text (`None` when absent or not visible ASCII).
fn header_text(h: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The value of `token=` in a query string.
fn query_token(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|kv| kv.strip_prefix("token="))
}

/// The value of the cookie `name` among the request's cookies.
fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// The cookie for the token, and a redirect to the page without it in the address.
fn trade(c: &Shared) -> Response {
    let set = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict",
        c.cookie, c.token
    );
    let mut resp = StatusCode::SEE_OTHER.into_response();
    let h = resp.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_static("/"));
    if let Ok(v) = HeaderValue::from_str(&set) {
        h.insert(header::SET_COOKIE, v);
    }
    resp
}

/// A refusal: the status and `{"error": why}`.
pub(crate) fn refusal(status: StatusCode, why: &str) -> Response {
    let body = serde_json::json!({ "error": why }).to_string();
    let mut resp = (status, Body::from(body)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"sigbox\""),
        );
    }
    resp
}

/// The headers every answer carries: the CSP, no MIME sniffing, no framing, no referrer, no
/// caching (the state changes, and the page is behind a token).
pub(crate) fn secure_headers(h: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(h, "content-security-policy", CSP);
    set(h, "x-content-type-options", "nosniff");
    set(h, "x-frame-options", "DENY");
    set(h, "referrer-policy", "no-referrer");
    set(h, "cache-control", "no-store");
    set(h, "cross-origin-opener-policy", "same-origin");
    set(h, "cross-origin-resource-policy", "same-origin");
}
