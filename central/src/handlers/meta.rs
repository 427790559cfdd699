//! Service endpoints: liveness, status, Prometheus metrics, the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Extension;
use axum::Json;
use kith_proto::{BackupStatus, Counts, ErrorBody, LaneDepths, StatusResponse};
use kith_shared::ids::UserId;

use crate::error::{Error, Result};
use crate::registry::{Holdings, Viewer};
use crate::state::AppState;

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// The caller's own counts; an admin also gets the family's and how its
/// backups stand. A member learns nothing of what others hold or when they
/// last captured.
#[utoipa::path(get, path = "/api/status",
    responses((status = 200, body = StatusResponse), (status = 401, body = ErrorBody)))]
pub(crate) async fn status(
    State(state): State<AppState>,
    viewer: Viewer,
) -> Result<Json<StatusResponse>> {
    let s = state.clone();
    let user = viewer.user_id().clone();
    let admin = viewer.is_admin();
    let (counts, queue, own, family, backup) = tokio::task::spawn_blocking(move || {
        let counts = s.registry().counts()?;
        let model = s.embed().map(|q| q.model_id().to_owned());
        let own = s.registry().holdings(Some(&user), model.as_deref())?;
        let (family, backup) = match admin {
            true => (
                Some(s.registry().holdings(None, model.as_deref())?),
                Some(crate::backup::health(
                    s.config().backup.as_ref(),
                    &s.registry().backups()?,
                    time::OffsetDateTime::now_utc(),
                )),
            ),
            false => (None, None),
        };
        let lanes = lane_depths(&s, Some(&user), (own.realtime_jobs, own.bulk_jobs))?;
        Ok::<_, crate::error::Error>((counts, lanes, own, family, backup))
    })
    .await??;
    let family = family.map(|f| counts_of(&f, counts.users));
    let failure = state.indexer().failure();
    Ok(Json(StatusResponse {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        queue,
        counts: counts_of(&own, 1),
        family,
        last_indexed_at: own.last_indexed_at,
        indexing_failing_since: failure.as_ref().map(|(_, since)| since.clone()),
        indexing_error: failure.filter(|_| admin).map(|(why, _)| why),
        backup: backup.map(|h| BackupStatus {
            dest: h.dest,
            every_secs: h.every.map(|d| d.as_secs()),
            last_good_at: h.last_good_at,
            last_good_age_secs: h.age.map(|d| d.as_secs()),
            last_good_dest: h.last_good_dest,
            last_error: h.last_error,
            warning: h.warning,
        }),
        search_backend: state.index().name().to_owned(),
        embedder: state.embedder_name(),
        machine: viewer.machine_name().unwrap_or_default().to_owned(),
        user: viewer.handle().to_owned(),
    }))
}

fn counts_of(h: &Holdings, users: u64) -> Counts {
    Counts {
        users,
        machines: h.machines,
        runs: h.runs,
        chunks: h.chunks,
        pending_index_jobs: h.realtime_jobs + h.bulk_jobs,
        chunks_embedded: h.chunks_embedded,
        runs_capped: h.runs_capped,
        chunks_cut: h.chunks_cut,
    }
}

/// The index's chunk count; 0 while a search server is unreachable, so
/// status and metrics keep answering (the reason is logged, and searches
/// say it in their 503).
fn chunks_or_zero(state: &AppState) -> u64 {
    state.index().n_chunks().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot count indexed chunks");
        0
    })
}

/// Pending work per lane: queries waiting for the model (everyone's: a
/// count of searches, which shows how busy the model is); on the ingest
/// lanes, `user`'s runs (everyone's with `None`) waiting for text indexing
/// (`jobs`, realtime and bulk) plus those waiting for the current model's
/// vectors (a model change puts every run on the bulk lane).
fn lane_depths(state: &AppState, user: Option<&UserId>, jobs: (u64, u64)) -> Result<LaneDepths> {
    let (realtime_jobs, bulk_jobs) = jobs;
    let Some(queue) = state.embed() else {
        return Ok(LaneDepths {
            query: 0,
            ingest_realtime: realtime_jobs,
            ingest_bulk: bulk_jobs,
        });
    };
    let (realtime, bulk) = state.registry().runs_awaiting_vectors(
        queue.model_id(),
        &crate::vectorizer::realtime_since(),
        user,
    )?;
    Ok(LaneDepths {
        query: queue.depths().query as u64,
        ingest_realtime: realtime_jobs + realtime,
        ingest_bulk: bulk_jobs + bulk,
    })
}

/// Family-wide figures, so an admin's token only (`kith-central user add
/// --admin`): a member's would tell when others capture and how much.
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, body = String), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    viewer: Viewer,
) -> Result<impl IntoResponse> {
    if !viewer.is_admin() {
        return Err(Error::AdminOnly { what: "/metrics" });
    }
    let s = state.clone();
    let (counts, lanes, n_chunks) = tokio::task::spawn_blocking(move || {
        let counts = s.registry().counts()?;
        let lanes = lane_depths(&s, None, (counts.realtime_jobs, counts.bulk_jobs))?;
        Ok::<_, crate::error::Error>((counts, lanes, chunks_or_zero(&s)))
    })
    .await??;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(
            &counts,
            &lanes,
            state
                .embed()
                .map(|q| q.embedded_texts())
                .unwrap_or_default(),
            n_chunks,
        ),
    ))
}

#[utoipa::path(get, path = "/api/openapi.json", responses((status = 200, body = Object)))]
pub(crate) async fn openapi(Extension(doc): Extension<ApiDoc>) -> impl IntoResponse {
    Json(doc.0.as_ref().clone())
}

/// The OpenAPI document, built once by `routes` (which knows every route)
/// and handed to `openapi`.
#[derive(Clone)]
pub(crate) struct ApiDoc(pub std::sync::Arc<utoipa::openapi::OpenApi>);
