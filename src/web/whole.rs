//! `GET /api/v1/runs/{id}/output`: a run's whole output, from the file its
//! replica keeps (`output_store = "files"`), streamed as it is read: as
//! text, both streams in the order they were printed or one of them
//! (`?stream=stdout`, `?stream=stderr`), or as the file itself
//! (`?format=gzip`, what `replicron history --output` asks for). A
//! replica that does not hold the file asks the one that does, through
//! its `[web] advertise_url`, as for live output; a run whose replica is
//! gone is answered 410, naming where its file was.

use std::convert::Infallible;
use std::io::Read as _;
use std::path::PathBuf;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::Shared;
use crate::history::RunRecord;
use crate::ops::output::{self, Whereabouts};
use crate::runner::kept;
use crate::runner::output::Stream;

/// `?stream=` and `?format=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WholeQuery {
    stream: Option<String>,
    format: Option<String>,
    download: Option<String>,
}

/// How the whole output is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// As text: both streams, or one.
    Text(Option<Stream>),
    /// The file as it is kept.
    Gzip,
}

const TEXT: &str = "text/plain; charset=utf-8";
const GZIP: &str = "application/gzip";

/// How many pieces a reader of a file may be ahead of the client.
const AHEAD: usize = 8;

fn refuse(status: StatusCode, message: String) -> Response {
    (status, message + "\n").into_response()
}

/// What `query` asks for.
fn form_of(query: &WholeQuery) -> Result<Form, String> {
    let only = match query.stream.as_deref() {
        None | Some("both") => None,
        Some("stdout") => Some(Stream::Stdout),
        Some("stderr") => Some(Stream::Stderr),
        Some(other) => return Err(format!("stream {other:?}: expected stdout, stderr or both")),
    };
    match query.format.as_deref() {
        None | Some("text") => Ok(Form::Text(only)),
        Some("gzip") if only.is_none() => Ok(Form::Gzip),
        Some("gzip") => {
            Err("stream is for format=text: the gzip file holds both streams".to_string())
        }
        Some(other) => Err(format!("format {other:?}: expected text or gzip")),
    }
}

/// `GET /api/v1/runs/{id}/output`.
pub(super) async fn whole(
    State(web): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<WholeQuery>,
    headers: HeaderMap,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return refuse(StatusCode::BAD_REQUEST, "not a run id".to_string());
    };
    let form = match form_of(&query) {
        Ok(form) => form,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let run = match web.store.find_brief(id).await {
        Ok(Some(run)) => run,
        Ok(None) => return refuse(StatusCode::NOT_FOUND, format!("no run {id}")),
        Err(e) => return refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    if web.auth.any_scoped()
        && !web
            .auth
            .shows(&super::caller(&web, &headers).await, &run.job)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "run {id} is of {}, which this token does not reach",
                run.job
            ),
        );
    }
    let name = format!(
        "{}-{id}.{}",
        run.job,
        if form == Form::Gzip { "gz" } else { "log" }
    );
    let mut response = match output::whereabouts(&run, &web.config()) {
        Whereabouts::Here(path) => send(path, form),
        Whereabouts::NotKept => refuse(StatusCode::NOT_FOUND, output::not_kept(&run)),
        Whereabouts::There { file } => {
            if run.instance == web.instance || headers.contains_key(super::live::HOP) {
                let why = match &file {
                    Some(_) => {
                        "the file is no longer there: output_retention or output_max deleted it, or it was removed"
                    }
                    None => "the file is not there",
                };
                return refuse(
                    StatusCode::GONE,
                    output::out_of_reach(&run, file.as_deref(), why),
                );
            }
            let record = RunRecord::from(&run);
            let mut path = format!("/api/v1/runs/{id}/output?");
            path.push_str(match form {
                Form::Gzip => "format=gzip",
                Form::Text(None) => "format=text",
                Form::Text(Some(Stream::Stdout)) => "stream=stdout",
                Form::Text(Some(Stream::Stderr)) => "stream=stderr",
            });
            let kind = if form == Form::Gzip {
                GZIP
            } else {
                "text/plain"
            };
            match super::live::ask_holder(&web, &record, &path, None, kind).await {
                Ok(answer) => relay(answer, form),
                Err(why) => refuse(
                    StatusCode::GONE,
                    output::out_of_reach(&run, file.as_deref(), &why),
                ),
            }
        }
    };
    if response.status() == StatusCode::OK {
        super::live::mark_run(&mut response, id);
        let disposition = if query.download.is_some() {
            "attachment"
        } else {
            "inline"
        };
        if let Ok(value) =
            axum::http::HeaderValue::from_str(&format!("{disposition}; filename=\"{name}\""))
        {
            response
                .headers_mut()
                .insert(header::CONTENT_DISPOSITION, value);
        }
    }
    response
}

/// The file at `path` as `form`, read on a blocking thread a piece at a
/// time as the client takes them.
fn send(path: PathBuf, form: Form) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(AHEAD);
    tokio::task::spawn_blocking(move || match form {
        Form::Gzip => {
            let Ok(mut file) = std::fs::File::open(&path) else {
                return;
            };
            let mut buffer = vec![0_u8; 64 * 1024];
            while let Ok(n @ 1..) = file.read(&mut buffer) {
                if tx
                    .blocking_send(Bytes::copy_from_slice(&buffer[..n]))
                    .is_err()
                {
                    return;
                }
            }
        }
        Form::Text(only) => {
            let _ = kept::read(&path, |stream, bytes| {
                if only.is_some_and(|only| only != stream) {
                    return true;
                }
                tx.blocking_send(Bytes::copy_from_slice(bytes)).is_ok()
            });
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<Bytes, Infallible>(bytes), rx))
    });
    answer(form, Body::from_stream(body))
}

/// The holder's answer, passed through.
fn relay(answer_of_holder: hyper::Response<hyper::body::Incoming>, form: Form) -> Response {
    answer(
        form,
        Body::from_stream(super::live::passed_on(answer_of_holder.into_body(), ())),
    )
}

/// An answer of `body` as `form`.
fn answer(form: Form, body: Body) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                if form == Form::Gzip { GZIP } else { TEXT },
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}
