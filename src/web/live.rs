//! A running run's output, as it is written: `GET /runs/{id}/output`, a
//! stream of server-sent events, and the output part of its page.
//!
//! The replica that runs the run (its holder) serves the stream from the
//! run's tail in memory ([`crate::runner::live`]). Any other replica asked
//! for it passes the holder's stream through: it finds the holder's
//! listener in the registry (`web_url`, from `[web] advertise_url`) and
//! asks it as an anonymous client with no credential, so a passed-through
//! stream carries no more rights than the caller's own (reading, which the
//! dashboard allows whoever reaches it). A request that was passed through
//! once is never passed on again.
//!
//! Each stream ends when the run ends (`end`), after [`STREAM_LIFE`] (the
//! browser reconnects, and resumes where it was by `Last-Event-ID`), or at
//! once when there is nothing to follow (`gone`); at most [`MAX_STREAMS`]
//! are open at once on a replica, so long-lived streams never take the
//! listener's connections from its pages. One client (by its address, as
//! the audit log has it) holds at most [`PER_CLIENT`] of them, and the last
//! [`RESERVED`] are kept for signed-in callers (a bearer token or a
//! session, held to no per-client share), so that anonymous readers
//! cannot take every one. A stream
//! passed through from another replica is that replica's: its clients
//! share its [`PER_CLIENT`] there, after their own cap on it.
//!
//! Each stream reads the run's output a piece of at most
//! [`running::MAX_READ`] bytes at a time, and reads the next only once
//! the client has taken the events of the last: a reader that never reads
//! holds one piece, whatever the job's `output_limit`; one that falls
//! behind the tail is told which bytes it missed (`skip`). The streams
//! open are the gauge `replicron_live_output_streams`.
//!
//! Events: `start` (`{"from","total","limit"}`: the offset of the first
//! byte sent, the bytes printed so far, the most kept), `out` and `err`
//! (stdout and stderr: a JSON array of `[text, classes]` pieces, ANSI
//! colours as classes, [`super::ansi`]; the event's id is the offset after
//! it), `skip` (`{"from","to"}`: bytes the watcher fell too far behind to
//! be sent), `end` and `gone` (a sentence: why nothing can be followed).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use hyper::body::Body as _;
use maud::{Markup, html};
use serde::Deserialize;
use tokio::sync::watch;

use super::ansi::{Ansi, Span};
use super::{Shared, Web};
use crate::history::{RunFilter, RunRecord, RunStatus};
use crate::runner::live::{self as running, Live, Progress};
use crate::runner::output::Stream;

/// The header of a request passed through from another replica.
pub(super) const HOP: &str = "x-replicron-hop";
/// The most output streams a replica serves at once.
pub(crate) const MAX_STREAMS: usize = 32;
/// The most output streams one client is served at once.
pub(crate) const PER_CLIENT: usize = 8;
/// How many of [`MAX_STREAMS`] only signed-in callers are given.
pub(crate) const RESERVED: usize = 4;
/// The most of a running run's output a page shows as it loads (its
/// script then follows from there).
const PAGE_TAIL: usize = 256 * 1024;
/// How long one stream lasts at most, well within the listener's
/// connection lifetime; the browser then reconnects.
const STREAM_LIFE: Duration = Duration::from_secs(90);
/// How long a replica waits to reach the holder.
const HOLDER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a passed-through stream may stay silent (its holder sends a
/// comment every 15 s) before it is taken for lost and ended.
const HOLDER_SILENCE: Duration = Duration::from_secs(40);
/// The most of a holder's answer a page reads for the output so far
/// ([`PAGE_TAIL`] bytes, as events: escaped JSON, with their colours).
const MAX_SNAPSHOT: usize = 8 * PAGE_TAIL;
/// The data of an `end` event (an event without data is not dispatched
/// by browsers).
const ENDED: &str = "\"the run has ended\"";
/// How many successful runs the usual duration is the median of.
const USUAL_OF: i64 = 20;

/// The output streams a replica serves, by client.
#[derive(Debug)]
pub(crate) struct Slots {
    open: Mutex<HashMap<IpAddr, usize>>,
    max: usize,
    reserved: usize,
    per_client: usize,
}

/// Why a stream was not given a slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// Every slot open to the caller is taken.
    Full,
    /// The client has its share already.
    Client,
}

/// A stream's slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Arc<Slots>,
    client: IpAddr,
}

impl Slots {
    /// `max` slots, `reserved` of them for signed-in callers, at most
    /// `per_client` to one client.
    pub(crate) fn new(max: usize, reserved: usize, per_client: usize) -> Arc<Slots> {
        Arc::new(Slots {
            open: Mutex::default(),
            max,
            reserved,
            per_client,
        })
    }

    /// A slot for `client`: a signed-in one is held to no share of its
    /// own, and may take the reserved slots.
    pub(crate) fn take(self: &Arc<Self>, client: IpAddr, signed_in: bool) -> Result<Slot, Busy> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let all: usize = open.values().sum();
        let limit = if signed_in {
            self.max
        } else {
            self.max.saturating_sub(self.reserved)
        };
        if all >= limit {
            return Err(Busy::Full);
        }
        let mine = open.entry(client).or_default();
        if *mine >= self.per_client && !signed_in {
            return Err(Busy::Client);
        }
        *mine += 1;
        STREAMS_OPEN.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            slots: self.clone(),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mine) = open.get_mut(&self.client) {
            *mine -= 1;
            if *mine == 0 {
                open.remove(&self.client);
            }
        }
        STREAMS_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

fn slots() -> &'static Arc<Slots> {
    static SLOTS: OnceLock<Arc<Slots>> = OnceLock::new();
    SLOTS.get_or_init(|| Slots::new(MAX_STREAMS, RESERVED, PER_CLIENT))
}

/// The streams open.
static STREAMS_OPEN: AtomicU64 = AtomicU64::new(0);

/// The live output gauge, as of now: how many streams are open.
pub(crate) fn record_gauges() {
    metrics::gauge!("replicron_live_output_streams")
        .set(STREAMS_OPEN.load(Ordering::Relaxed) as f64);
}

/// Where the other replicas reach a listener bound to `addr`:
/// `configured` (`[web] advertise_url`) if set, else loopback's own
/// address, the host's name for a wildcard address, the address itself
/// otherwise.
pub(crate) fn advertised(configured: Option<&str>, addr: std::net::SocketAddr) -> String {
    if let Some(url) = configured {
        return url.to_string();
    }
    let ip = addr.ip();
    let host = if ip.is_unspecified() {
        hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".to_string())
    } else if ip.is_ipv6() {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    format!("http://{host}:{}", addr.port())
}

/// A stream's bytes as text: UTF-8 decoded (a character cut between two
/// chunks is kept for the next) and its escape sequences applied, each
/// stream on its own.
#[derive(Default)]
struct Decoder {
    carry: [Vec<u8>; 2],
    ansi: [Ansi; 2],
}

impl Decoder {
    fn feed(&mut self, stream: Stream, bytes: &[u8]) -> Vec<Span> {
        let i = usize::from(stream == Stream::Stderr);
        let carry = &mut self.carry[i];
        carry.extend_from_slice(bytes);
        let cut = complete_up_to(carry);
        let text = String::from_utf8_lossy(&carry[..cut]).into_owned();
        carry.drain(..cut);
        self.ansi[i].feed(&text)
    }
}

/// The length of `bytes` without a UTF-8 character cut at its end.
fn complete_up_to(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=n.min(4) {
        let b = bytes[n - back];
        if b & 0xC0 != 0x80 {
            let needs = match b {
                0xF8.. => 1,
                0xF0.. => 4,
                0xE0.. => 3,
                0xC0.. => 2,
                _ => 1,
            };
            return if needs > back { n - back } else { n };
        }
    }
    n
}

fn event(name: &str, data: String) -> Event {
    Event::default().event(name).data(data)
}

fn stream_event(stream: Stream, spans: &[Span], end: u64) -> Event {
    let name = match stream {
        Stream::Stdout => "out",
        Stream::Stderr => "err",
    };
    event(name, serde_json::to_string(spans).unwrap_or_default()).id(end.to_string())
}

/// One watcher's place in a run's output.
struct Follow {
    live: Arc<Live>,
    progress: watch::Receiver<Progress>,
    /// The offset of the next byte to send.
    at: u64,
    /// What the run had printed as of the last read.
    total: u64,
    decoder: Decoder,
    /// Events not yet taken.
    queue: VecDeque<Event>,
    started: bool,
    /// Send what was printed when the stream began (its last
    /// [`PAGE_TAIL`] bytes), then end.
    snapshot: Option<u64>,
    ended: bool,
    done: bool,
    until: tokio::time::Instant,
    _slot: Slot,
}

impl Follow {
    /// Queues the next piece of what was printed since the last read.
    fn read(&mut self, first: bool) {
        let read = self.live.read(self.at, running::MAX_READ);
        if first {
            let start =
                serde_json::json!({"from": read.from, "total": read.total, "limit": read.limit});
            self.queue.push_back(event("start", start.to_string()));
        } else if read.from > self.at {
            let skip = serde_json::json!({"from": self.at, "to": read.from});
            self.queue.push_back(event("skip", skip.to_string()));
            // Nothing held from before the gap belongs to what follows it.
            self.decoder = Decoder::default();
        }
        let mut end = read.from;
        for (stream, bytes) in &read.pieces {
            end += bytes.len() as u64;
            let spans = self.decoder.feed(*stream, bytes);
            if !spans.is_empty() {
                self.queue.push_back(stream_event(*stream, &spans, end));
            }
        }
        self.at = end.max(self.at);
        self.total = read.total;
    }

    async fn next(mut self) -> Option<(Result<Event, Infallible>, Follow)> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done {
                return None;
            }
            if !self.started {
                self.started = true;
                self.ended = self.progress.borrow_and_update().ended;
                if self.snapshot.is_some() {
                    let total = self.live.read(u64::MAX, 0).total;
                    self.at = self.at.max(total.saturating_sub(PAGE_TAIL as u64));
                    self.snapshot = Some(total);
                }
                self.read(true);
            } else if self.at < self.snapshot.unwrap_or(self.total) {
                // Behind what was printed: the next piece at once.
                self.read(false);
            } else if self.ended {
                self.queue.push_back(event("end", ENDED.to_string()));
                self.done = true;
            } else if self.snapshot.is_some() {
                self.done = true;
            } else {
                tokio::select! {
                    changed = self.progress.changed() => {
                        self.ended = changed.is_err() || self.progress.borrow_and_update().ended;
                        self.read(false);
                    }
                    () = tokio::time::sleep_until(self.until) => self.done = true,
                }
            }
        }
    }
}

fn sse<S>(events: S) -> Response
where
    S: futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    let headers = response.headers_mut();
    // A buffering reverse proxy (nginx) would hold the events back.
    headers.insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    // A run's output is kept by no cache, as the pages are not.
    headers.insert(
        header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    response
}

/// A stream of these events only.
fn closed(events: Vec<Event>) -> Response {
    sse(futures_util::stream::iter(events.into_iter().map(Ok)))
}

fn gone(why: &str) -> Response {
    closed(vec![event(
        "gone",
        serde_json::to_string(why).unwrap_or_default(),
    )])
}

fn busy(why: Busy) -> Response {
    let error = match why {
        Busy::Full => format!(
            "this replica already serves every live output stream it serves at once ({MAX_STREAMS}, the last {RESERVED} to signed-in callers only); try again shortly"
        ),
        Busy::Client => format!(
            "this replica already serves {PER_CLIENT} live output streams to your address, the most it serves one client; close one, or try again shortly"
        ),
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5")],
        axum::Json(serde_json::json!({ "error": error })),
    )
        .into_response()
}

/// `/runs/{id}/output`'s query.
#[derive(Debug, Default, Deserialize)]
pub(super) struct OutputQuery {
    /// Start after this offset (a page that shows the output so far).
    #[serde(default)]
    from: Option<u64>,
    /// Send what was printed so far, then end.
    #[serde(default)]
    snapshot: Option<String>,
}

/// The header that says which run's output stream an answer is: what a
/// replica passing a stream through checks, so that it relays replicron's
/// stream of that run and nothing else that answers 200 at the address.
pub(crate) const RUN_HEADER: &str = "x-replicron-run";

/// Whether `headers`, of an answer asked of a holder, are those of
/// replicron's output of run `id` as `kind` (a content type: the live
/// stream's, or the whole output's).
fn is_stream_of(headers: &HeaderMap, id: i64, kind: &str) -> bool {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    header(header::CONTENT_TYPE.as_str()).is_some_and(|t| t.starts_with(kind))
        && header(RUN_HEADER) == Some(id.to_string().as_str())
}

/// Marks `response` as replicron's output of run `id`.
pub(super) fn mark_run(response: &mut Response, id: i64) {
    if let Ok(value) = axum::http::HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(RUN_HEADER, value);
    }
}

/// `GET /runs/{id}/output`.
pub(super) async fn output(
    State(web): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<OutputQuery>,
    headers: HeaderMap,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return (StatusCode::BAD_REQUEST, "not a run id\n").into_response();
    };
    let client = web.client(peer.map(|peer| peer.0.0.ip()), &headers);
    let mut response = output_of(web, id, query, headers, client).await;
    mark_run(&mut response, id);
    response
}

/// [`output`] of run `id`.
async fn output_of(
    web: Shared,
    id: i64,
    query: OutputQuery,
    headers: HeaderMap,
    client: IpAddr,
) -> Response {
    // Without its output: a finished run's is not read to say "ended".
    let run = match web.store.find_brief(id).await {
        Ok(Some(run)) => RunRecord::from(&run),
        Ok(None) => return (StatusCode::NOT_FOUND, format!("no run {id}\n")).into_response(),
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    };
    // A token limited to some jobs follows only their runs (the session
    // is looked up only where some token is).
    if web.auth.any_scoped()
        && !web
            .auth
            .shows(&super::caller(&web, &headers).await, &run.job)
    {
        return (
            StatusCode::FORBIDDEN,
            format!(
                "run {id} is of {}, which this token does not reach\n",
                run.job
            ),
        )
            .into_response();
    }
    if run.status != RunStatus::Running {
        return closed(vec![event("end", ENDED.to_string())]);
    }
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or(query.from)
        .unwrap_or(0);
    let snapshot = query.snapshot.is_some();
    if run.instance != web.instance {
        if headers.contains_key(HOP) {
            return gone(&format!("run {id} is not running on this replica"));
        }
        let slot = match take_slot(&web, &headers, client).await {
            Ok(slot) => slot,
            Err(why) => return busy(why),
        };
        return pass_through(&web, &run, from, snapshot, slot).await;
    }
    // A run's row is written as it is claimed, a moment before its process
    // starts: a stream asked for in between waits for it a little.
    let mut found = running::find(&web.instance, id);
    for _ in 0..20 {
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        found = running::find(&web.instance, id);
    }
    let Some(live) = found else {
        return gone("no output of this run is captured while it runs");
    };
    let slot = match take_slot(&web, &headers, client).await {
        Ok(slot) => slot,
        Err(why) => return busy(why),
    };
    let follow = Follow {
        progress: live.watch(),
        live,
        at: from,
        total: 0,
        decoder: Decoder::default(),
        queue: VecDeque::new(),
        started: false,
        snapshot: snapshot.then_some(0),
        ended: false,
        done: false,
        until: tokio::time::Instant::now() + STREAM_LIFE,
        _slot: slot,
    };
    sse(futures_util::stream::unfold(follow, Follow::next))
}

/// A stream's slot for `client`, who is signed in if `headers` carry a
/// credential that may act.
async fn take_slot(web: &Web, headers: &HeaderMap, client: IpAddr) -> Result<Slot, Busy> {
    let slots = slots();
    // Signed in or not, a client within its share and the anonymous
    // slots needs no look-up of its session.
    if let Ok(slot) = slots.take(client, false) {
        return Ok(slot);
    }
    let signed_in = super::caller(web, headers).await.token_name().is_some();
    slots.take(client, signed_in)
}

/// Whether `authority` (`HOST[:PORT]`) names this host's loopback
/// interface (or any address of its own): dialled from one host, it
/// reaches that host, not the one that advertised it.
pub(crate) fn is_loopback(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.split(':').next().unwrap_or(authority),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// Asks the holder of `run` for `path`, as an anonymous client, for an
/// answer of content type `kind`.
pub(super) async fn ask_holder(
    web: &Shared,
    run: &RunRecord,
    path: &str,
    last_event: Option<u64>,
    kind: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let (url, host) = match web.store.web_url_of(run.instance.clone()).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            return Err(format!(
                "its replica, {}, is gone or serves no dashboard",
                run.instance
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let unreachable = |e: String| {
        format!(
            "its replica, {}, does not answer at {url}: {e}",
            run.instance
        )
    };
    let authority = url
        .strip_prefix("http://")
        .map(|a| a.trim_end_matches('/'))
        .filter(|a| !a.is_empty() && !a.contains(['/', '@', ' ']))
        .ok_or_else(|| unreachable("not an http://HOST[:PORT] address".to_string()))?
        .to_string();
    if is_loopback(&authority) && host != crate::registry::this_host() {
        return Err(format!(
            "its replica, {}, is not reachable from this host: it listens on a loopback address ({url}) of another host, {host}; set [web] advertise_url on it to an address the other hosts reach",
            run.instance
        ));
    }
    let has_port = match authority.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => authority.contains(':'),
    };
    let address = if has_port {
        authority.clone()
    } else {
        format!("{authority}:80")
    };
    let answer = async {
        let stream = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Body>(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let mut request = hyper::Request::get(path)
            .header(header::HOST, &authority)
            .header(header::ACCEPT, kind)
            .header(HOP, "1");
        if let Some(id) = last_event {
            request = request.header("last-event-id", id.to_string());
        }
        let request = request.body(Body::empty()).map_err(|e| e.to_string())?;
        sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())
    };
    let response = tokio::time::timeout(HOLDER_TIMEOUT, answer)
        .await
        .map_err(|_| unreachable("no answer in time".to_string()))?
        .map_err(unreachable)?;
    if response.status() != StatusCode::OK {
        return Err(unreachable(format!("it answered {}", response.status())));
    }
    if !is_stream_of(response.headers(), run.id, kind) {
        return Err(unreachable(format!(
            "what answers there is not replicron's output of run {}",
            run.id
        )));
    }
    Ok(response)
}

/// The holder's stream of `run`, passed through.
async fn pass_through(
    web: &Shared,
    run: &RunRecord,
    from: u64,
    snapshot: bool,
    slot: Slot,
) -> Response {
    let path = format!(
        "/runs/{}/output?from={from}{}",
        run.id,
        if snapshot { "&snapshot=1" } else { "" }
    );
    let response = match ask_holder(web, run, &path, None, "text/event-stream").await {
        Ok(response) => response,
        Err(why) => return gone(&why),
    };
    let body = passed_on(response.into_body(), slot);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The data of a holder's answer `body`, as it comes, `keep` held until it
/// ends (a stream's slot). The holder sends at least a comment every 15 s:
/// a holder silent for longer is gone, and so is what it sent.
pub(super) fn passed_on<K: Send + 'static>(
    body: hyper::body::Incoming,
    keep: K,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    futures_util::stream::unfold((body, keep), |(mut body, keep)| async move {
        loop {
            let frame = tokio::time::timeout(
                HOLDER_SILENCE,
                std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)),
            )
            .await
            .ok()??;
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some((Ok(data), (body, keep)));
                    }
                }
                Err(_) => return None,
            }
        }
    })
}

/// What a page shows of a run's output.
#[derive(Debug, Default)]
struct Shown {
    /// The offset of its first byte in all the run printed.
    from: u64,
    /// All the run printed, if known.
    total: Option<u64>,
    /// The most bytes kept, if known.
    limit: Option<u64>,
    /// Its pieces, each of one stream.
    pieces: Vec<(Stream, Vec<Span>)>,
    /// Why the output so far could not be read, if it could not.
    problem: Option<String>,
}

/// The server-sent events of `text`: (event, data) pairs, and each
/// event's id.
fn parse_events(text: &str) -> Vec<(String, String, Option<u64>)> {
    text.split("\n\n")
        .filter_map(|block| {
            let (mut name, mut data, mut id) = (String::new(), Vec::new(), None);
            for line in block.lines() {
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => name = value.to_string(),
                    "data" => data.push(value),
                    "id" => id = value.parse().ok(),
                    _ => {}
                }
            }
            (!name.is_empty()).then(|| (name, data.join("\n"), id))
        })
        .collect()
}

/// The output of running `run` so far, from wherever it runs.
async fn so_far(web: &Shared, run: &RunRecord) -> Shown {
    if run.instance == web.instance {
        let Some(live) = running::find(&web.instance, run.id) else {
            return Shown {
                problem: Some("no output of this run is captured while it runs".to_string()),
                ..Shown::default()
            };
        };
        let total = live.read(u64::MAX, 0).total;
        let read = live.read(total.saturating_sub(PAGE_TAIL as u64), PAGE_TAIL);
        let mut decoder = Decoder::default();
        return Shown {
            from: read.from,
            total: Some(read.total),
            limit: Some(read.limit),
            pieces: read
                .pieces
                .iter()
                .map(|(stream, bytes)| (*stream, decoder.feed(*stream, bytes)))
                .collect(),
            problem: None,
        };
    }
    let path = format!("/runs/{}/output?snapshot=1", run.id);
    let read = async {
        let response = ask_holder(web, run, &path, None, "text/event-stream").await?;
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
                text.extend_from_slice(&data);
                if text.len() > MAX_SNAPSHOT {
                    break;
                }
            }
        }
        Ok::<_, String>(String::from_utf8_lossy(&text).into_owned())
    };
    let text = match tokio::time::timeout(HOLDER_TIMEOUT, read).await {
        Ok(Ok(text)) => text,
        Ok(Err(why)) => {
            return Shown {
                problem: Some(why),
                ..Shown::default()
            };
        }
        Err(_) => {
            return Shown {
                problem: Some(format!(
                    "its replica, {}, did not send its output in time",
                    run.instance
                )),
                ..Shown::default()
            };
        }
    };
    let mut shown = Shown::default();
    for (name, data, id) in parse_events(&text) {
        match name.as_str() {
            "start" => {
                let start: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
                shown.from = start["from"].as_u64().unwrap_or(0);
                shown.total = start["total"].as_u64();
                shown.limit = start["limit"].as_u64();
            }
            "out" | "err" => {
                let stream = if name == "out" {
                    Stream::Stdout
                } else {
                    Stream::Stderr
                };
                let spans: Vec<Span> = serde_json::from_str(&data).unwrap_or_default();
                shown.pieces.push((stream, spans));
                if let Some(id) = id {
                    shown.total = Some(shown.total.unwrap_or(0).max(id));
                }
            }
            "gone" => shown.problem = serde_json::from_str(&data).ok(),
            _ => {}
        }
    }
    shown
}

/// A length of time as people say it: `45 s`, `1 min 12 s`, `2 h 5 min`.
pub(crate) fn span(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}

/// The median duration of the last [`USUAL_OF`] successful runs of `job`,
/// in seconds, and how many there were.
async fn usual(web: &Shared, job: &str) -> Option<(f64, usize)> {
    let runs = web
        .store
        .list_briefs(RunFilter {
            job: Some(job.to_string()),
            status: Some(RunStatus::Succeeded),
            limit: USUAL_OF,
            ..RunFilter::default()
        })
        .await
        .ok()?;
    median(
        runs.iter()
            .filter_map(|r| r.duration())
            .map(|d| d.num_milliseconds().max(0) as f64 / 1000.0)
            .collect(),
    )
}

/// The median duration of the successful runs among `recent` (a job's
/// last runs, as a listing already has them), and how many there were.
pub(crate) fn usual_of(recent: &[RunRecord]) -> Option<(f64, usize)> {
    median(
        recent
            .iter()
            .filter(|r| r.status == RunStatus::Succeeded)
            .filter_map(|r| r.duration_seconds)
            .collect(),
    )
}

/// What a listing says of running `run` instead of its duration: how long
/// it has run, by `now` (the database's), and how long its job's runs
/// usually take, if known.
pub(crate) fn running_for(
    now: DateTime<Utc>,
    run: &RunRecord,
    usual: Option<(f64, usize)>,
) -> String {
    let elapsed = DateTime::parse_from_rfc3339(&run.started_at)
        .map(|t| (now - t.with_timezone(&Utc)).num_seconds().max(0) as u64)
        .unwrap_or(0);
    match usual {
        Some((median, _)) => format!(
            "running for {} · usually {}",
            span(elapsed),
            span(median.round() as u64)
        ),
        None => format!("running for {}", span(elapsed)),
    }
}

/// The median of `durations`, and how many there were.
fn median(mut durations: Vec<f64>) -> Option<(f64, usize)> {
    if durations.is_empty() {
        return None;
    }
    durations.sort_by(f64::total_cmp);
    let n = durations.len();
    let median = if n % 2 == 1 {
        durations[n / 2]
    } else {
        (durations[n / 2 - 1] + durations[n / 2]) / 2.0
    };
    Some((median, n))
}

/// How long running `run` has run, against how long its job's runs
/// usually take.
async fn timing(web: &Shared, run: &RunRecord) -> Markup {
    let started = DateTime::parse_from_rfc3339(&run.started_at).map(|t| t.with_timezone(&Utc));
    let now = web.store.database_now().await;
    let elapsed = match (started, now) {
        (Ok(started), Ok(now)) => (now - started).num_seconds().max(0) as u64,
        _ => 0,
    };
    let usual = usual(web, &run.job).await;
    html! {
        p id="timing" {
            "running for "
            span id="elapsed" data-seconds=(elapsed) { (span(elapsed)) }
            @match usual {
                Some((median, n)) => {
                    " · usually " (span(median.round() as u64))
                    " (median of the last " (n) " successful " @if n == 1 { "run" } @else { "runs" } ")"
                    @if elapsed as f64 > median * 1.5 && elapsed > 10 { " " span class="over" { "longer than usual" } }
                }
                None => { " · no successful run yet to compare with" }
            }
        }
    }
}

/// The pieces of an output, each stream's in its own span.
fn pieces(pieces: &[(Stream, Vec<Span>)]) -> Markup {
    let spans = |spans: &Vec<Span>| {
        html! {
            @for (text, class) in spans {
                @if class.is_empty() { (text) } @else { span class=(class) { (text) } }
            }
        }
    };
    html! {
        @for (stream, piece) in pieces {
            @if *stream == Stream::Stderr {
                span class="stderr" title="stderr" { (spans(piece)) }
            } @else {
                (spans(piece))
            }
        }
    }
}

/// The output box: it opens at its end (a reversed flex column), and can
/// be scrolled with the keyboard.
fn output_box(shown: &Shown, running: bool, live: Option<i64>) -> Markup {
    let kept: u64 = shown
        .pieces
        .iter()
        .flat_map(|(_, spans)| spans.iter().map(|(text, _)| text.len() as u64))
        .sum();
    let truncated = shown.from > 0;
    html! {
        p class="muted" id="output-legend" {
            span id="truncated" {
                @if truncated {
                    @if let Some(total) = shown.total {
                        "Showing the last " (total.saturating_sub(shown.from)) " of " (total) " bytes. "
                    } @else {
                        "Showing the last " (kept) " bytes: the run printed more, and only its tail is kept. "
                    }
                }
            }
            // The history keeps the streams merged: only a running run's
            // output tells them apart.
            @if running {
                "Output from stderr is marked " span class="sample-stderr" { "like this" } ". "
            }
            a href="#end" { "Jump to the end" }
        }
        div class="outbox" tabindex="0" role="region" aria-label="Output" {
            pre class="output" id="output"
                data-running=[running.then_some("1")]
                data-stream=[live.map(|id| format!("/runs/{id}/output"))]
                data-offset=[live.map(|_| shown.total.unwrap_or(0))]
                data-from=[live.map(|_| shown.from)]
                data-limit=[live.and(shown.limit)] {
                (pieces(&shown.pieces))
                span id="end" {}
            }
        }
    }
}

/// The output part of a run's page: for a running run, how long it has run
/// and its output so far, which the page's script then follows; for
/// another, the output the history kept.
pub(crate) async fn section(web: &Shared, run: &RunRecord) -> Markup {
    let whole = whole_output(web, run);
    if run.status != RunStatus::Running {
        let limit = web.config().job(&run.job).map(|job| job.output_limit);
        let shown = stored(run.output.as_deref().unwrap_or_default(), limit);
        return html! {
            h2 { "Output" }
            (whole)
            (output_box(&shown, false, None))
        };
    }
    let timing = timing(web, run).await;
    let shown = so_far(web, run).await;
    html! {
        (timing)
        h2 { "Output" }
        (whole)
        // Without a script, a reload shows what was printed since; with
        // one, the page follows the output as it is written.
        p class="muted" id="live-reload" {
            "Shown as of loading; " a href="" { "reload" } " to see more."
        }
        @if let Some(problem) = &shown.problem {
            p class="muted" id="live-problem" { "Live output is unavailable: " (problem) }
        }
        (output_box(&shown, true, shown.problem.is_none().then_some(run.id)))
        script src=(super::assets::path("live.js")) defer {}
    }
}

/// Where a run's page offers the run's whole output, if its job kept it in
/// a file (`output_store = "files"`): read here, or from its replica.
fn whole_output(web: &Shared, run: &RunRecord) -> Markup {
    let job_keeps = || {
        web.config()
            .job(&run.job)
            .is_some_and(|job| job.output_files.is_some())
    };
    if run.output_file.is_none() && !(run.status == RunStatus::Running && job_keeps()) {
        return html! {};
    }
    let url = format!("/api/v1/runs/{}/output", run.id);
    html! {
        p class="muted" id="whole-output" {
            "Its whole output is kept"
            @if let Some(file) = &run.output_file {
                " in " code { (file) } " on " (run.instance)
            }
            ": "
            a href=(url) { "read it all" }
            ", or "
            a href=(format!("{url}?download=1")) download { "download it" }
            "."
        }
    }
}

/// `text`, the output a finished run left, as a page shows it: when it is
/// as long as its job's `output_limit`, what it printed before was not
/// kept (the history keeps no count of it: a run's total is known only
/// while it runs).
fn stored(text: &str, limit: Option<u64>) -> Shown {
    let kept = text.len() as u64;
    let cut = limit.is_some_and(|limit| limit > 0 && kept >= limit);
    Shown {
        from: u64::from(cut),
        total: None,
        limit,
        pieces: vec![(Stream::Stdout, super::ansi::spans(text))],
        problem: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_replicrons_stream_of_the_run_is_passed_through() {
        let headers = |kind: &str, run: Option<&str>| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, kind.parse().unwrap());
            if let Some(run) = run {
                headers.insert(RUN_HEADER, run.parse().unwrap());
            }
            headers
        };
        assert!(is_stream_of(
            &headers("text/event-stream", Some("42")),
            42,
            "text/event-stream"
        ));
        // Another run's stream, a page that answers 200, a stream that
        // does not say whose it is.
        assert!(!is_stream_of(
            &headers("text/event-stream", Some("41")),
            42,
            "text/event-stream"
        ));
        assert!(!is_stream_of(
            &headers("text/html", Some("42")),
            42,
            "text/event-stream"
        ));
        assert!(!is_stream_of(
            &headers("text/event-stream", None),
            42,
            "text/event-stream"
        ));
    }

    #[test]
    fn a_character_cut_between_chunks_is_decoded_whole() {
        let mut decoder = Decoder::default();
        let text = "ü✓\n".as_bytes();
        assert_eq!(decoder.feed(Stream::Stdout, &text[..1]), Vec::<Span>::new());
        // The other stream's state is its own.
        assert_eq!(
            decoder.feed(Stream::Stderr, b"e"),
            vec![("e".to_string(), String::new())]
        );
        assert_eq!(
            decoder.feed(Stream::Stdout, &text[1..3]),
            vec![("ü".to_string(), String::new())]
        );
        assert_eq!(
            decoder.feed(Stream::Stdout, &text[3..]),
            vec![("✓\n".to_string(), String::new())]
        );
        assert_eq!(complete_up_to(b"ab\xff"), 3, "an invalid byte is not held");
    }

    #[test]
    fn events_are_read_back() {
        let text = "retry: 1000\n\nevent: start\ndata: {\"from\":0}\n\nevent: out\nid: 5\ndata: [[\"a\",\"\"]]\n\n: keep-alive\n\n";
        assert_eq!(
            parse_events(text),
            vec![
                ("start".to_string(), "{\"from\":0}".to_string(), None),
                ("out".to_string(), "[[\"a\",\"\"]]".to_string(), Some(5)),
            ]
        );
    }

    #[test]
    fn a_stored_output_as_long_as_the_limit_is_marked_cut() {
        assert_eq!(stored("0123456789", Some(10)).from, 1);
        assert_eq!(stored("012345678", Some(10)).from, 0);
        assert_eq!(
            stored("\x1b[31mred", None).pieces[0].1,
            vec![("red".to_string(), "a-red".to_string())]
        );
    }

    #[test]
    fn the_advertised_address_follows_the_listener() {
        let at = |text: &str| text.parse::<std::net::SocketAddr>().expect("address");
        assert_eq!(
            advertised(None, at("127.0.0.1:9187")),
            "http://127.0.0.1:9187"
        );
        assert_eq!(advertised(None, at("[::1]:9187")), "http://[::1]:9187");
        assert_eq!(advertised(None, at("10.0.0.7:80")), "http://10.0.0.7:80");
        let host = hostname::get().expect("host name");
        assert_eq!(
            advertised(None, at("0.0.0.0:9187")),
            format!("http://{}:9187", host.to_string_lossy())
        );
        assert_eq!(
            advertised(Some("http://cron-2:9187"), at("0.0.0.0:9187")),
            "http://cron-2:9187"
        );
    }

    #[test]
    fn a_loopback_address_is_told_apart() {
        for local in [
            "127.0.0.1:9187",
            "127.0.0.2",
            "localhost:80",
            "LOCALHOST.",
            "web.localhost:1",
            "[::1]:9187",
            "0.0.0.0:9187",
        ] {
            assert!(is_loopback(local), "{local}");
        }
        for remote in [
            "10.0.0.7:9187",
            "cron-2:9187",
            "[fd00::7]:80",
            "localhost.example",
        ] {
            assert!(!is_loopback(remote), "{remote}");
        }
    }

    #[test]
    fn slots_are_shared_out_by_client() {
        let slots = Slots::new(6, 2, 3);
        let (a, b, c) = (
            IpAddr::from([10, 0, 0, 1]),
            IpAddr::from([10, 0, 0, 2]),
            IpAddr::from([10, 0, 0, 3]),
        );
        let mut held: Vec<Slot> = (0..3).map(|_| slots.take(a, false).expect("a's")).collect();
        // One client has its share...
        assert_eq!(slots.take(a, false).unwrap_err(), Busy::Client);
        held.push(slots.take(b, false).expect("b's"));
        // ...and anonymous callers leave the reserved slots.
        assert_eq!(slots.take(c, false).unwrap_err(), Busy::Full);
        // A signed-in caller gets one, even from a client with its share.
        held.push(slots.take(c, true).expect("signed in"));
        held.push(slots.take(a, true).expect("signed in, from a"));
        assert_eq!(slots.take(c, true).unwrap_err(), Busy::Full);
        // Each is given back when its stream ends.
        held.truncate(2);
        assert!(slots.take(c, false).is_ok());
        drop(held);
        let all: Vec<Slot> = (0..3).map(|_| slots.take(b, false).expect("b's")).collect();
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(span(40), "40 s");
        assert_eq!(span(72), "1 min 12 s");
        assert_eq!(span(7500), "2 h 5 min");
    }
}
