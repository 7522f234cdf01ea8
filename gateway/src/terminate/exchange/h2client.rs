//! kubegate's HTTP/2 client toward backends, on `h2` directly.
//!
//! hyper's HTTP/2 client hands every request to the connection's task over a channel, spawns a
//! task per request to wait for its response and sends the response back over another channel:
//! two task hops, a spawn and a move of the request's future per request. Here the request's
//! own task opens the stream and waits for the response; the connection's task only reads and
//! writes frames. (The largest share of terminate mode's CPU per request left that was
//! kubegate's to choose: bench/README.md, "Terminate mode".)

use crate::telemetry::AttemptFailure;
use bytes::Bytes;
use h2::client::SendRequest;
use h2::RecvStream;
use http::{Request, Response};
use http_body::{Body, Frame};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

/// The h2 linked is kubegate's patched one (`vendor/h2/KUBEGATE.md`): this names a constant
/// only the patch has, so a dependency that pulls in a newer h2 — which makes Cargo ignore
/// `[patch.crates-io]` with only a warning — fails the build instead of dropping the patch.
const _: &str = h2::KUBEGATE_PATCH;

/// Sends requests on one upstream connection (cheap to clone).
pub type Sender = SendRequest<Bytes>;

/// The largest response header block kubegate accepts from a backend (hyper's client default).
const MAX_HEADER_LIST_SIZE: u32 = 16 << 10;

/// Streams kubegate may open before the backend's SETTINGS say how many it allows: the
/// apiserver's default (and hyper's client's), so that a burst on a new connection waits in h2
/// instead of being refused.
const INITIAL_MAX_SEND_STREAMS: usize = 100;

/// The HTTP/2 handshake on `io`: returns the sender and the connection, which must be polled
/// (on a task of its own) for any request to move.
pub async fn handshake<T>(
    io: T,
    stream_window: u32,
    connection_window: u32,
) -> Result<(Sender, h2::client::Connection<T, Bytes>), h2::Error>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    h2::client::Builder::new()
        .initial_window_size(stream_window)
        .initial_connection_window_size(connection_window)
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .initial_max_send_streams(INITIAL_MAX_SEND_STREAMS)
        .enable_push(false)
        .handshake(io)
        .await
}

/// Sends `req` with `body` on `sender`'s connection and waits for the response headers. The
/// body is handed to `h2` whole; it leaves as the backend's flow-control windows allow (it is
/// held in memory anyway, for retries, so queueing it costs nothing more).
/// [`AttemptFailure::Unsent`]: the connection took no new stream (it received GOAWAY, or ended), and
/// will take none.
pub async fn send(
    sender: &Sender,
    req: Request<()>,
    body: &Bytes,
) -> Result<Response<ResponseStream>, AttemptFailure> {
    // A fresh clone has no stream of its own waiting to open, so `poll_ready` is not needed:
    // it would only check what `send_request` checks (a connection error, stream ids left).
    let mut sender = sender.clone();
    let end_of_stream = body.is_empty();
    let (response, stream) = sender.send_request(req, end_of_stream).map_err(unsent)?;
    answer(response, stream, (!end_of_stream).then_some(body)).await
}

/// Hands `body` (if any) to the stream and waits for the response headers. A backend may
/// answer before it has the body — a 401, priority and fairness's 429, a handler that reads
/// none — and then reset the stream with `NO_ERROR` (RFC 9113 §8.1; Go's and hyper's servers
/// both do): the body can no longer be sent, but the answer stands. (Taken for a broken
/// stream, such a write was answered 502 when this task lost the CPU between opening the
/// stream and handing it the body.)
async fn answer(
    response: h2::client::ResponseFuture,
    mut stream: h2::SendStream<Bytes>,
    body: Option<&Bytes>,
) -> Result<Response<ResponseStream>, AttemptFailure> {
    let sent = match body {
        Some(body) => stream.send_data(body.clone(), true),
        None => Ok(()),
    };
    match response.await {
        Ok(resp) => Ok(resp.map(ResponseStream::new)),
        Err(e) => Err(failure_of(&sent.err().unwrap_or(e))),
    }
}

/// Why `h2` did not open a stream: the connection's error (GOAWAY received, I/O failed, a
/// protocol error), or a request `h2` will not send — which no connection would send either,
/// so it is not held against the connection, and the request is not retried as unprocessed.
fn unsent(e: h2::Error) -> AttemptFailure {
    if e.is_go_away() || e.is_io() || e.reason().is_some() {
        AttemptFailure::Unsent
    } else {
        tracing::warn!(error = %e, "an upstream request could not be sent");
        AttemptFailure::Reset
    }
}

/// A backend's response body: the data, then any trailers. Each piece of data received is
/// given back to the backend's flow-control windows as it is passed on, so what a response
/// holds in kubegate is bounded by its stream window while its client reads slowly.
pub struct ResponseStream {
    recv: RecvStream,
    data_ended: bool,
}

impl ResponseStream {
    fn new(recv: RecvStream) -> ResponseStream {
        ResponseStream {
            recv,
            data_ended: false,
        }
    }
}

impl Body for ResponseStream {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if !this.data_ended {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Fails only once the stream has ended, when it no longer matters.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_ended = true,
            }
        }
        Poll::Ready(match ready!(this.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// Reads what an error on an upstream HTTP/2 stream says about the request.
pub fn failure_of(error: &h2::Error) -> AttemptFailure {
    if error.is_remote() && error.reason() == Some(h2::Reason::REFUSED_STREAM) {
        return AttemptFailure::RefusedStream;
    }
    // Only a graceful GOAWAY fails exactly the streams above its last-stream-id; one with an
    // error code fails every stream of the connection (h2's `recv_go_away` vs the connection
    // error).
    if error.is_go_away() && error.is_remote() && error.reason() == Some(h2::Reason::NO_ERROR) {
        return AttemptFailure::GoAway;
    }
    AttemptFailure::Reset
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    /// A backend that answers 429 without reading the request's body and resets the stream
    /// with `NO_ERROR`, as an apiserver's priority and fairness does; kubegate hands the body
    /// over only after the reset has arrived (what losing the CPU in between does).
    #[tokio::test]
    async fn an_answer_before_the_body_stands_after_the_backends_no_error_reset() {
        let (client_io, server_io) = tokio::io::duplex(64 << 10);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let (_req, mut respond) = conn.accept().await.unwrap().unwrap();
            let resp = Response::builder().status(429).body(()).unwrap();
            respond.send_response(resp, true).unwrap();
            // A PING answered: the response queued before it is on the wire, and a reset
            // now no longer takes its place (h2 drops what a reset stream has queued).
            let mut ping_pong = conn.ping_pong().unwrap();
            tokio::select! {
                pong = ping_pong.ping(h2::Ping::opaque()) => drop(pong.unwrap()),
                _ = conn.accept() => panic!("the connection ended before the PONG"),
            }
            respond.send_reset(h2::Reason::NO_ERROR);
            // Drive the connection until the client is done with it.
            while let Some(Ok(_)) = conn.accept().await {}
        });
        let (sender, conn) = handshake(client_io, 65_535, 65_535).await.unwrap();
        tokio::spawn(conn);
        let mut opener = sender.clone();
        let req = Request::post("https://backend/api/v1/namespaces/default/configmaps")
            .body(())
            .unwrap();
        let (response, mut stream) = opener.send_request(req, false).unwrap();
        let reset = std::future::poll_fn(|cx| stream.poll_reset(cx))
            .await
            .unwrap();
        assert_eq!(reset, h2::Reason::NO_ERROR);
        let body = Bytes::from_static(b"{}");
        let resp = answer(response, stream, Some(&body)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        drop(sender);
        drop(opener);
        server.abort();
    }
}
