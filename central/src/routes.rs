//! The one list of routes, the middleware around them, and the OpenAPI
//! document assembled from the handlers' annotations and kith-proto's types.
//!
//! Every refusal carries kith's error body, also those made below the
//! handlers (the method router's 405, the decompression layer's 415) and
//! the limits checked on a request's head before anything reads its body.
//! Hyper's own refusals (a request it cannot parse, a head over ~400 KB)
//! happen before any of this and stay bodiless.

use std::sync::Arc;

use axum::body::HttpBody;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Router};
use tokio::sync::Semaphore;
use tower_http::decompression::RequestDecompressionLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::{DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;
use utoipa::OpenApi;

use crate::error::{Code, Error};
use crate::handlers::{context, conversations, meta, runs, search, shares, usage, web};
use crate::http_limits::{
    body_deadline, body_limit, DeadlineBody, BODY_READ_TIMEOUT, MAX_ANONYMOUS_IN_FLIGHT,
    MAX_HEADERS, MAX_HEADER_BYTES, MAX_REQUEST_BYTES, MAX_URI_BYTES,
};
use crate::state::AppState;
use crate::web::{actions, assets, pages};

pub fn app(state: AppState) -> Router {
    let ingest = state.config().max_body_bytes;
    let plain_http = state.config().insecure_http;
    let anonymous = Arc::new(Semaphore::new(MAX_ANONYMOUS_IN_FLIGHT));
    Router::new()
        .route("/healthz", get(meta::healthz))
        .route("/metrics", get(meta::metrics))
        .route("/api/openapi.json", get(meta::openapi))
        .route("/api/status", get(meta::status))
        .route(
            crate::http_limits::INGEST_PATH,
            post(runs::post).layer(DefaultBodyLimit::max(ingest)),
        )
        .route("/api/runs/forest", get(runs::forest))
        .route("/api/runs/{id}", get(runs::get))
        .route("/api/runs/{id}/jsonl", get(runs::jsonl))
        .route("/api/runs/{id}/descendants", get(runs::descendants))
        .route("/api/conversations", get(conversations::index))
        .route(
            "/api/conversations/{id}",
            get(conversations::get).delete(conversations::delete),
        )
        .route("/api/conversations/{id}/turns", get(conversations::turns))
        .route("/api/conversations/{id}/jsonl", get(conversations::jsonl))
        .route("/api/conversations/{id}/tags", post(conversations::tags))
        .route("/api/conversations/{id}/resume", post(conversations::resume))
        .route("/api/conversations/{id}/fork", post(conversations::fork))
        .route("/api/tags", get(conversations::tag_list))
        .route("/api/search", post(search::post))
        .route("/api/context", post(context::post))
        .route("/api/shares", post(shares::post).get(shares::index))
        .route("/api/shares/{id}", delete(shares::delete))
        .route("/api/audit", get(shares::audit))
        .route("/api/usage", get(usage::index))
        .route("/api/web/link", post(web::link))
        .merge(pages())
        .fallback(|| async { Error::not_found("route") })
        .method_not_allowed_fallback(|| async { Error::MethodNotAllowed })
        // The limit applies to the decompressed body, so a small zstd bomb
        // cannot expand past it. (A delta's route sets its own.)
        .layer(Extension(meta::ApiDoc(Arc::new(api_doc()))))
        .layer(DefaultBodyLimit::max(ingest.min(MAX_REQUEST_BYTES)))
        .layer(RequestDecompressionLayer::new().gzip(true).zstd(true))
        .layer(RequestBodyTimeoutLayer::new(BODY_READ_TIMEOUT))
        // One line per request at debug (method, path, status, latency; no
        // query string, no header: never a token), a server error at warn.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    tracing::debug_span!("request", method = %req.method(), path = %req.uri().path())
                })
                .on_request(())
                .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                .on_failure(DefaultOnFailure::new().level(Level::WARN)),
        )
        .layer(middleware::from_fn(
            move |req: Request, next: Next| {
                let anonymous = anonymous.clone();
                async move {
                // A sign-in (no credentials yet) takes a seat of its own
                // budget: however many or slow, the rest is served.
                let _seat = match anonymous_seat(&req, &anonymous) {
                    Ok(seat) => seat,
                    Err(e) => return e.into_response(),
                };
                let limit = body_limit(ingest, req.uri().path());
                // Plain HTTP to the browser, unless a proxy in front says
                // the browser came over HTTPS.
                let plain = plain_http && !forwarded_https(req.headers());
                let deadline = body_deadline(declared_length(req.headers()), limit);
                let req =
                    req.map(|body| axum::body::Body::new(DeadlineBody::new(body, deadline)));
                match check_head(&req, limit) {
                    Ok(()) if plain => {
                        without_secure_cookies(with_error_body(next.run(req).await, limit))
                    }
                    Ok(()) => with_error_body(next.run(req).await, limit),
                    Err(e) => e.into_response(),
                }
                }
            },
        ))
        .with_state(state)
}

/// The web page: HTML for browsers, signed in with a session cookie, each
/// page reading through the same functions as the JSON routes above.
fn pages() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::search))
        .route("/recent", get(pages::recent))
        .route("/c/{id}", get(pages::conversation))
        .route("/c/{id}/raw", get(pages::raw))
        .route("/shares", get(pages::shares).post(actions::share))
        .route("/shares/{id}/revoke", post(actions::revoke_share))
        .route("/audit", get(pages::audit))
        .route("/usage", get(pages::usage))
        .route("/machines", get(pages::machines))
        .route("/machines/revoke", post(actions::revoke_machine))
        .route("/admin", get(pages::admin))
        .route("/signin", get(actions::signin_form).post(actions::signin))
        .route(
            "/signin/link",
            get(actions::signin_link_form).post(actions::signin_link),
        )
        .route("/signout", post(actions::signout))
        .route("/signout/everywhere", post(actions::signout_everywhere))
        .route("/assets/kith.css", get(assets::css))
        .route("/assets/kith.js", get(assets::js))
        .layer(DefaultBodyLimit::max(crate::http_limits::PAGE_BODY_LIMIT))
        .layer(middleware::map_response(crate::web::extractor_refusals))
        .layer(middleware::map_response(assets::page_headers))
}

/// Refuses a request by its head alone, before its body is read or its
/// bearer looked up: a target or headers over their limits, or a declared
/// `Content-Length` over the body limit (a compressed body that long
/// decompresses longer still, but for a few bytes of framing).
fn check_head(req: &Request, limit: usize) -> Result<(), Error> {
    let target = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if target > MAX_URI_BYTES {
        return Err(Error::UriTooLong {
            limit: MAX_URI_BYTES,
        });
    }
    if req.headers().len() > MAX_HEADERS {
        return Err(Error::TooManyHeaders { limit: MAX_HEADERS });
    }
    let head: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if head > MAX_HEADER_BYTES {
        return Err(Error::HeadersTooLarge {
            limit: MAX_HEADER_BYTES,
        });
    }
    if declared_length(req.headers()).is_some_and(|n| n > limit as u64) {
        return Err(Error::BodyTooLarge { limit });
    }
    Ok(())
}

/// A seat in the sign-in routes' budget (`None` for any other route: those
/// check their credentials before they read a body, so a request without
/// valid ones is refused at once); a 503 when the budget is spent.
fn anonymous_seat(
    req: &Request,
    budget: &Arc<Semaphore>,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, Error> {
    if !req.uri().path().starts_with("/signin") {
        return Ok(None);
    }
    budget.clone().try_acquire_owned().map(Some).map_err(|_| {
        Error::unavailable(
            Code::Busy,
            "central is answering as many sign-ins as it takes at once; try again in a moment",
        )
    })
}

/// The body length a request's `Content-Length` declares.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Whether a proxy in front says the browser came over HTTPS.
fn forwarded_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// Served over plain HTTP (`--insecure-http`, on a network address), a
/// browser drops a `Secure` cookie, so no sign-in would hold: the cookies go
/// without the flag (and as plainly as everything else on that link).
fn without_secure_cookies(mut res: Response) -> Response {
    let cookies: Vec<_> = res
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    res.headers_mut().remove(header::SET_COOKIE);
    for cookie in cookies {
        let plain = cookie
            .to_str()
            .ok()
            .map(|c| c.replace("; Secure", ""))
            .and_then(|c| c.parse().ok())
            .unwrap_or(cookie);
        res.headers_mut().append(header::SET_COOKIE, plain);
    }
    res
}

/// A refusal made below the handlers comes without a body: it gets kith's,
/// keeping its headers (`Allow`, `Accept-Encoding`).
fn with_error_body(res: Response, limit: usize) -> Response {
    let status = res.status();
    if !status.is_client_error()
        || res.headers().contains_key(header::CONTENT_TYPE)
        || res.body().size_hint().exact() != Some(0)
    {
        return res;
    }
    let error = match status {
        StatusCode::BAD_REQUEST => Error::invalid(Code::BadRequest, "the request is malformed"),
        StatusCode::METHOD_NOT_ALLOWED => Error::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => Error::BodyTooLarge { limit },
        StatusCode::URI_TOO_LONG => Error::UriTooLong {
            limit: MAX_URI_BYTES,
        },
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Error::UnreadableBody {
            message: "the body must be JSON, sent as is or with Content-Encoding gzip or zstd"
                .into(),
        },
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => Error::HeadersTooLarge {
            limit: MAX_HEADER_BYTES,
        },
        _ => return res,
    };
    let (parts, _) = res.into_parts();
    let mut out = error.into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_LENGTH {
            out.headers_mut().append(name, value.clone());
        }
    }
    out
}

#[derive(OpenApi)]
#[openapi(paths(
    meta::healthz,
    meta::status,
    meta::metrics,
    meta::openapi,
    runs::post,
    runs::get,
    runs::jsonl,
    runs::descendants,
    runs::forest,
    conversations::index,
    conversations::get,
    conversations::delete,
    conversations::turns,
    conversations::jsonl,
    conversations::tags,
    conversations::resume,
    conversations::fork,
    conversations::tag_list,
    search::post,
    context::post,
    shares::post,
    shares::index,
    shares::delete,
    shares::audit,
    usage::index,
    web::link,
))]
struct Paths;

/// The OpenAPI document of the whole HTTP API.
pub fn api_doc() -> utoipa::openapi::OpenApi {
    let mut doc = kith_proto::ApiDoc::openapi();
    doc.merge(Paths::openapi());
    declare_refusals(&mut doc);
    doc
}

/// Routes anyone may call; every other one takes a machine's bearer token.
const PUBLIC: [&str; 2] = ["/healthz", "/api/openapi.json"];

/// What a path's `{id}` may be: what `kith_shared::ids` parses (a run,
/// conversation or share id, or a prefix of one).
const ID_PATTERN: &str = "^[A-Za-z0-9_-]{1,128}$";

/// Declares, in one place, what every operation can answer besides its
/// own results, by the shape of the route: the bearer token (401 without
/// one), the head and body limits checked before any handler (413), a
/// request it cannot read (400: parameters or a body), an id it does not
/// know (404: a path parameter), a body it cannot decode (415); and the
/// bearer scheme itself, and the pattern of path ids.
fn declare_refusals(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::security::{
        HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
    };
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};

    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("a machine's token (`kith-central machine register`)"))
                .build(),
        ),
    );
    doc.security = Some(vec![SecurityRequirement::new(
        "bearer",
        Vec::<String>::new(),
    )]);
    let refusal = |why: &str| {
        ResponseBuilder::new()
            .description(why)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
    };
    let id_schema = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(ID_PATTERN))
        .build();
    for (path, item) in doc.paths.paths.iter_mut() {
        let public = PUBLIC.contains(&path.as_str());
        for op in [&mut item.get, &mut item.post, &mut item.delete]
            .into_iter()
            .flatten()
        {
            let params = op.parameters.get_or_insert_with(Vec::new);
            let has_path_id = params.iter().any(|p| p.parameter_in == ParameterIn::Path);
            for p in params
                .iter_mut()
                .filter(|p| p.parameter_in == ParameterIn::Path)
            {
                p.schema = Some(id_schema.clone().into());
            }
            let reads_input = !params.is_empty() || op.request_body.is_some();
            if params.is_empty() {
                op.parameters = None;
            }
            let responses = &mut op.responses.responses;
            let mut add = |status: &str, why: &str| {
                responses
                    .entry(status.to_owned())
                    .or_insert_with(|| refusal(why).into());
            };
            add("413", "the request's declared body is over the limit");
            if public {
                op.security = Some(vec![SecurityRequirement::default()]);
            } else {
                add("401", "missing, unknown or revoked bearer token");
            }
            if reads_input {
                add("400", "a parameter or the body is malformed");
            }
            if has_path_id {
                add("404", "no such id, or one the caller may not read");
            }
            if op.request_body.is_some() {
                add(
                    "415",
                    "the body is not JSON, or in an encoding other than gzip or zstd",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};

    async fn body_of(res: Response) -> serde_json::Value {
        let bytes = to_bytes(res.into_body(), 1 << 16).await.unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or_default()
    }

    /// Over plain HTTP every cookie goes without `Secure` (a browser would
    /// drop it), each kept otherwise as it was.
    #[test]
    fn plain_http_cookies_lose_only_the_secure_flag() {
        let mut res = StatusCode::SEE_OTHER.into_response();
        for cookie in [
            "kith_session=ab; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=7776000",
            "kith_signin=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0",
        ] {
            res.headers_mut().append(
                header::SET_COOKIE,
                axum::http::HeaderValue::from_static(cookie),
            );
        }
        let res = without_secure_cookies(res);
        let cookies: Vec<&str> = res
            .headers()
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        assert_eq!(
            cookies,
            [
                "kith_session=ab; Path=/; HttpOnly; SameSite=Lax; Max-Age=7776000",
                "kith_signin=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0",
            ]
        );
        // Behind a TLS proxy on another host the browser came over HTTPS:
        // the flag stays.
        let mut headers = HeaderMap::new();
        assert!(!forwarded_https(&headers));
        headers.insert(
            "x-forwarded-proto",
            axum::http::HeaderValue::from_static("HTTPS"),
        );
        assert!(forwarded_https(&headers));
        headers.insert(
            "x-forwarded-proto",
            axum::http::HeaderValue::from_static("http"),
        );
        assert!(!forwarded_https(&headers));
    }

    /// A bodiless refusal gets kith's body and keeps its headers; answers
    /// that have a body, and successes, pass as they are.
    #[tokio::test]
    async fn bodiless_refusals_get_the_error_body() {
        let cases = [
            (StatusCode::BAD_REQUEST, Code::BadRequest),
            (StatusCode::METHOD_NOT_ALLOWED, Code::MethodNotAllowed),
            (StatusCode::PAYLOAD_TOO_LARGE, Code::PayloadTooLarge),
            (StatusCode::URI_TOO_LONG, Code::UriTooLong),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Code::UnsupportedMediaType,
            ),
            (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                Code::HeadersTooLarge,
            ),
        ];
        for (status, code) in cases {
            let res = Response::builder()
                .status(status)
                .header(header::ALLOW, "GET,HEAD")
                .body(Body::empty())
                .unwrap_or_default();
            let out = with_error_body(res, 4096);
            assert_eq!(out.status(), status);
            assert_eq!(out.headers()[header::ALLOW], "GET,HEAD");
            assert_eq!(out.headers()[header::CONTENT_TYPE], "application/json");
            let body = body_of(out).await;
            assert_eq!(body["error"]["code"], code.name(), "{status}");
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                assert!(body["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("4096 bytes"));
            }
        }
        let has_body = Error::run_not_found().into_response();
        let out = with_error_body(has_body, 4096);
        assert_eq!(
            body_of(out).await["error"]["code"],
            Code::RunNotFound.name()
        );
        let ok = with_error_body(StatusCode::NO_CONTENT.into_response(), 4096);
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert!(!ok.headers().contains_key(header::CONTENT_TYPE));
        // A status kith has no code for passes as it is.
        let teapot = with_error_body(StatusCode::IM_A_TEAPOT.into_response(), 4096);
        assert!(!teapot.headers().contains_key(header::CONTENT_TYPE));
    }
}
