//! kubegate's own requests to a cluster (a review, a read or a watch of the shed object): sent
//! as user `kubegate` over its front-proxy certificate (`Outgoing::as_kubegate`), placed and
//! retried as any request kubegate makes (`dispatch`: ready replicas, the holds), under the
//! generation in force as each is sent.

use crate::net::Unplaced;
use crate::state::{Gateway, Stream};
use crate::terminate::exchange::body::read_whole;
use crate::terminate::exchange::h2client::ResponseStream;
use crate::terminate::exchange::in_flight::InFlight;
use crate::terminate::upstream::dispatch::{dispatch, Answer};
use crate::terminate::upstream::outgoing::Outgoing;
use crate::terminate::upstream::upstreams::Upstreams;
use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use http_body_util::BodyExt;
use kubegate_wire::classify::RequestClass;
use std::time::Instant;

/// Why a request of kubegate's own was not answered.
#[derive(Debug)]
pub enum Unanswered {
    /// kubegate has no identity of its own here: no front-proxy certificate.
    NoIdentity,
    /// No replica could take it, or the last one tried failed it: worth asking again.
    Transient(String),
}

/// A replica's answer to a request of kubegate's own.
pub struct OwnAnswer {
    /// Its status.
    pub status: StatusCode,
    body: OwnBody,
}

enum OwnBody {
    /// An answer kubegate read whole and kept the status of (a 429, 503 or 404 it reads to tell
    /// a replica shutting down from a busy one).
    Whole,
    /// A body still arriving, and the request's registration on its replica meanwhile.
    Streaming {
        body: ResponseStream,
        in_flight: InFlight,
        _stream: Stream,
    },
}

impl OwnAnswer {
    /// The next piece of its body; `None` at its end.
    pub async fn next(&mut self) -> Option<Result<Bytes, String>> {
        let OwnBody::Streaming { body, .. } = &mut self.body else {
            return None;
        };
        loop {
            match body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    // Trailers: nothing to read.
                    Err(_) => continue,
                },
                Err(e) => return Some(Err(e.to_string())),
            }
        }
    }

    /// Its whole body, of at most `limit` bytes.
    pub async fn whole(self, limit: usize) -> Result<Bytes, String> {
        match self.body {
            OwnBody::Whole => Ok(Bytes::new()),
            OwnBody::Streaming { body, .. } => read_whole(body, limit).await,
        }
    }

    /// Follows the drains of the replica answering (changed when one begins): a watch of
    /// kubegate's own moves as a client's would. `None` for an answer read whole.
    pub fn drains(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match &self.body {
            OwnBody::Whole => None,
            OwnBody::Streaming { in_flight, .. } => Some(in_flight.drains()),
        }
    }
}

/// Sends `method path` (with `body`, JSON) of `class` as kubegate to a replica of `upstreams`.
pub async fn send(
    gw: &Gateway,
    upstreams: &Upstreams,
    method: Method,
    path: Uri,
    body: Bytes,
    class: RequestClass,
) -> Result<OwnAnswer, Unanswered> {
    let outgoing =
        Outgoing::as_kubegate(upstreams, method, path, body).ok_or(Unanswered::NoIdentity)?;
    let generation = gw.config().generation();
    let (_, answer) = dispatch(
        (gw, &generation),
        upstreams,
        &outgoing,
        class,
        &mut Vec::new(),
        Instant::now(),
    )
    .await
    .map_err(|e| match e {
        Unplaced::NoBackend => Unanswered::Transient("no apiserver is ready".to_string()),
        Unplaced::Failed(f) => Unanswered::Transient(f.as_str().to_string()),
    })?;
    Ok(match answer {
        Answer::Whole(resp) => OwnAnswer {
            status: resp.status(),
            body: OwnBody::Whole,
        },
        Answer::Streaming {
            resp,
            in_flight,
            stream,
        } => OwnAnswer {
            status: resp.status(),
            body: OwnBody::Streaming {
                body: resp.into_body(),
                in_flight,
                _stream: stream,
            },
        },
    })
}
