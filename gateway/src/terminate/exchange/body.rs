//! The body of a response to a terminate-mode client: made by kubegate (an error `Status`),
//! relayed from a backend while the request counts as in flight there, the events of a
//! watch followed across backends, or an answer joined reads share. And small answers read
//! whole.

use crate::state::{Gateway, Stream};
use crate::telemetry::access_log::{self, Entry};
use crate::terminate::exchange::charge::SharedBytes;
use crate::terminate::exchange::h2client::ResponseStream;
use crate::terminate::exchange::in_flight::InFlight;
use crate::terminate::rules::Slot;
use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use kubegate_config::AccessLogConfig;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The largest small answer read whole: a 429/503 read to tell a shutting-down apiserver from
/// a busy one, a refused upgrade's `Status`.
const SMALL_BODY_LIMIT: usize = 16 * 1024;

/// Errors a response body passes on to hyper (which resets the client's stream).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Data a relayed body gathers into one frame from what the backend has already sent: HTTP/2
/// clients accept 16 KiB frames by default, and each frame kubegate sends is one TLS record
/// and one write. Backends send smaller ones (nginx 8 KiB; an apiserver as its encoder
/// flushes); gathering halved kubegate's writes for a 1 MiB LIST. Nothing waits for more.
const GATHER_BYTES: usize = 16 * 1024;

/// A response body.
pub enum ResponseBody {
    /// Made by kubegate, or a backend's small body read whole.
    Full(Option<Bytes>),
    /// Streamed from a backend.
    Relayed(Relayed),
    /// A watch followed across backends (`watch.rs`).
    Watch(WatchBody),
    /// Another body, written to the access log when it ends.
    Logged(Box<LoggedBody>),
    /// Another body, and what is let go when it ends (or the client goes).
    Held(Box<(ResponseBody, Option<Guard>)>),
    /// Bytes read ahead of the rest of a body.
    Prefixed(Box<(Option<Bytes>, ResponseBody)>),
}

/// What a body holds until it ends.
pub enum Guard {
    /// Its request's place under its `dispatch` rule.
    Slot(Slot),
    /// Bytes several responses share (a joined read's answer, `join`): their charge against a
    /// bound, given back with the last of them.
    Shared(Arc<SharedBytes>),
}

impl ResponseBody {
    /// `inner`, holding `slot` until it ends (or the client goes).
    pub fn held(inner: ResponseBody, slot: Slot) -> ResponseBody {
        ResponseBody::Held(Box::new((inner, Some(Guard::Slot(slot)))))
    }
}

/// A response body whose request the access log records once the body ends (or the client
/// leaves): with the bytes sent and the time it took.
pub struct LoggedBody {
    inner: ResponseBody,
    /// Until it is written.
    entry: Option<Entry>,
    started: Instant,
    gw: Arc<Gateway>,
    /// The access log's settings of the request's generation.
    log: AccessLogConfig,
}

impl LoggedBody {
    /// `inner`, recorded as `entry` (its time counted from `started`) by `log` when it ends.
    pub fn wrap(
        inner: ResponseBody,
        entry: Entry,
        started: Instant,
        gw: Arc<Gateway>,
        log: AccessLogConfig,
    ) -> ResponseBody {
        ResponseBody::Logged(Box::new(LoggedBody {
            inner,
            entry: Some(entry),
            started,
            gw,
            log,
        }))
    }

    fn finish(&mut self) {
        let Some(mut entry) = self.entry.take() else {
            return;
        };
        entry.duration = self.started.elapsed();
        access_log::record(&self.log, self.gw.metrics(), entry);
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.finish();
    }
}

impl ResponseBody {
    /// `shared`'s bytes, which other responses send too: counted until the last has let go.
    pub fn shared(shared: Arc<SharedBytes>) -> ResponseBody {
        let inner = ResponseBody::full(shared.bytes().clone());
        ResponseBody::Held(Box::new((inner, Some(Guard::Shared(shared)))))
    }

    /// `shared`'s bytes, then `rest`; counted until this ends.
    pub fn shared_then(shared: Arc<SharedBytes>, rest: ResponseBody) -> ResponseBody {
        let inner = ResponseBody::prefixed(shared.bytes().clone(), rest);
        ResponseBody::Held(Box::new((inner, Some(Guard::Shared(shared)))))
    }

    /// `read`, then `rest`.
    pub fn prefixed(read: Bytes, rest: ResponseBody) -> ResponseBody {
        ResponseBody::Prefixed(Box::new(((!read.is_empty()).then_some(read), rest)))
    }

    /// A body of `bytes`.
    pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
        let b = bytes.into();
        ResponseBody::Full((!b.is_empty()).then_some(b))
    }

    /// No body.
    pub fn empty() -> ResponseBody {
        ResponseBody::Full(None)
    }
}

/// The client's side of a followed watch: its events, as the watch's task forwards them.
pub struct WatchBody(mpsc::Receiver<Bytes>);

impl WatchBody {
    /// The events `events` receives.
    pub fn new(events: mpsc::Receiver<Bytes>) -> WatchBody {
        WatchBody(events)
    }

    /// Its events, to read them elsewhere (a shared watch's feed).
    pub fn into_receiver(self) -> mpsc::Receiver<Bytes> {
        self.0
    }
}

/// Reads a small answer whole (at most 16 KiB, within 10 s).
pub async fn read_small<B>(body: B) -> Result<Bytes, ()>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    read_whole(body, SMALL_BODY_LIMIT).await.map_err(drop)
}

/// Reads an answer whole, at most `limit` bytes within 10 s; why not, in words for a log.
pub async fn read_whole<B>(body: B, limit: usize) -> Result<Bytes, String>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let read = Limited::new(body, limit).collect();
    match tokio::time::timeout(Duration::from_secs(10), read).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(format!("the answer is larger than {limit} bytes"))
        }
        Ok(Err(e)) => Err(format!("the answer broke off: {e}")),
        Err(_) => Err("the answer did not arrive within 10s".to_string()),
    }
}

/// A backend's response body, relayed. Holds the request's in-flight registration and its
/// stream slot until the body ends.
pub struct Relayed {
    inner: ResponseStream,
    /// What the backend sent after the data gathered into the last frame (the end, trailers,
    /// an error), passed on at the next poll.
    after_gathered: Option<Option<Result<Frame<Bytes>, h2::Error>>>,
    /// A watch ends cleanly when its backend goes away, as an apiserver ending it would: the
    /// client re-watches from its last resourceVersion instead of relisting.
    end_cleanly_on_error: bool,
    held: Option<(InFlight, Stream)>,
}

impl Relayed {
    /// Relays `inner`; the registration and the stream slot are released when it ends.
    pub fn new(inner: ResponseStream, watch: bool, in_flight: InFlight, stream: Stream) -> Relayed {
        Relayed {
            inner,
            after_gathered: None,
            end_cleanly_on_error: watch,
            held: Some((in_flight, stream)),
        }
    }

    /// The backend's next frame; data frames already received after it are appended up to
    /// [`GATHER_BYTES`].
    fn gather(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let first = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let data = match first.into_data() {
            Ok(data) if data.len() < GATHER_BYTES => data,
            Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
            Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
        };
        let mut gathered: Option<BytesMut> = None;
        let mut len = data.len();
        loop {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) if frame.is_data() => {
                    let more = frame.into_data().unwrap_or_default();
                    let buf = gathered.get_or_insert_with(|| {
                        let mut b = BytesMut::with_capacity(GATHER_BYTES.max(len + more.len()));
                        b.extend_from_slice(&data);
                        b
                    });
                    buf.extend_from_slice(&more);
                    len = buf.len();
                    if len >= GATHER_BYTES {
                        break;
                    }
                }
                Poll::Ready(after) => {
                    self.after_gathered = Some(after);
                    break;
                }
                Poll::Pending => break,
            }
        }
        let data = gathered.map_or(data, BytesMut::freeze);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ResponseBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Relayed(r) => {
                let polled = match r.after_gathered.take() {
                    Some(after) => Poll::Ready(after),
                    None => r.gather(cx),
                };
                match polled {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(data), Some((in_flight, _))) = (frame.data_ref(), &mut r.held)
                        {
                            in_flight.carried(data.len());
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(None) => {
                        r.held = None;
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(Err(e))) => {
                        let backend = r
                            .held
                            .take()
                            .map(|(f, _)| f.backend().info().name.clone())
                            .unwrap_or_default();
                        if r.end_cleanly_on_error {
                            tracing::debug!(backend, error = %e, "upstream watch broke: ending it cleanly");
                            Poll::Ready(None)
                        } else {
                            tracing::debug!(backend, error = %e, "upstream response broke");
                            Poll::Ready(Some(Err(e.into())))
                        }
                    }
                }
            }
            ResponseBody::Watch(w) => w.0.poll_recv(cx).map(|e| e.map(|b| Ok(Frame::data(b)))),
            ResponseBody::Logged(l) => {
                let polled = Pin::new(&mut l.inner).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(data), Some(entry)) = (frame.data_ref(), &mut l.entry) {
                            entry.bytes += data.len() as u64;
                        }
                    }
                    Poll::Ready(None) | Poll::Ready(Some(Err(_))) => l.finish(),
                    Poll::Pending => {}
                }
                polled
            }
            ResponseBody::Held(h) => {
                let polled = Pin::new(&mut h.0).poll_frame(cx);
                if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
                    h.1 = None;
                }
                polled
            }
            ResponseBody::Prefixed(p) => match p.0.take() {
                Some(read) => Poll::Ready(Some(Ok(Frame::data(read)))),
                None => Pin::new(&mut p.1).poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(b) => b.is_none(),
            ResponseBody::Relayed(r) => {
                matches!(r.after_gathered, Some(None))
                    || (r.after_gathered.is_none() && r.inner.is_end_stream())
            }
            ResponseBody::Watch(_) => false,
            ResponseBody::Logged(l) => l.inner.is_end_stream(),
            ResponseBody::Held(h) => h.0.is_end_stream(),
            ResponseBody::Prefixed(p) => p.0.is_none() && p.1.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ResponseBody::Full(None) => SizeHint::with_exact(0),
            ResponseBody::Relayed(r) => r.inner.size_hint(),
            ResponseBody::Watch(_) => SizeHint::default(),
            ResponseBody::Logged(l) => l.inner.size_hint(),
            ResponseBody::Held(h) => h.0.size_hint(),
            ResponseBody::Prefixed(p) => {
                let read = p.0.as_ref().map_or(0, |b| b.len() as u64);
                let rest = p.1.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + read);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + read);
                }
                hint
            }
        }
    }
}
