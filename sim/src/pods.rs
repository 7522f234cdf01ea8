//! Pods as the apiserver and a kubelet behind it would serve them to kubectl: created running
//! with every container ready, `log` (with `follow`), and the upgraded subresources — `exec`
//! and `attach` over WebSocket (`v5.channel.k8s.io`, kubectl's default) or SPDY/3.1 (its
//! fallback), `portforward` over SPDY/3.1 (kubectl falls back to it when the WebSocket tunnel is
//! refused). The containers run a fake process: `cat` echoes stdin, `echo`, `hostname`, `true`,
//! `false` and `sh -c "exit N"` answer as expected, anything else is not found; `attach` is a
//! `cat`. Every forwarded port echoes what it is sent.

use crate::respond::{self, Reply};
use crate::spdy;
use crate::state::Sim;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// How long a SPDY exec waits for the client to open the streams it asked for.
const STREAMS_WAIT: Duration = Duration::from_secs(10);

/// Completes a new pod's status: running, every container ready.
pub fn complete_status(pod: &mut Value) {
    let now = crate::objects::now();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    json!({
                        "name": c["name"],
                        "image": c["image"],
                        "imageID": "",
                        "ready": true,
                        "started": true,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now}},
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    pod["status"] = json!({
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
        ],
        "hostIP": "127.0.0.1",
        "podIP": "10.244.0.10",
        "startTime": now,
        "containerStatuses": statuses,
    });
}

/// Serves `pods/NAME/SUBRESOURCE` for `pod` (already read from the store).
pub fn subresource(
    sim: &Arc<Sim>,
    pod: &Value,
    subresource: &str,
    req: Request<Incoming>,
    params: &[(String, String)],
) -> Reply {
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let values = |key: &str| -> Vec<String> {
        params
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let flag = |key: &str| values(key).first().is_some_and(|v| crate::query::truthy(v));
    match subresource {
        "log" => log(sim, name, flag("follow")),
        "exec" | "attach" => {
            let command = if subresource == "attach" {
                vec!["cat".to_string()]
            } else {
                values("command")
            };
            let io = Streams {
                stdin: flag("stdin"),
                stdout: flag("stdout"),
                stderr: flag("stderr") && !flag("tty"),
            };
            session(
                req,
                Session::Exec {
                    command,
                    io,
                    pod: name,
                },
            )
        }
        "portforward" => session(req, Session::PortForward),
        _ => respond::status(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(json!({})),
        ),
    }
}

/// `kubectl logs [-f]`: three lines, then with `follow` a line every half second until the
/// client goes away.
fn log(sim: &Arc<Sim>, pod: String, follow: bool) -> Reply {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let replica = sim.behaviour.replica.clone();
    tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            n += 1;
            let line = format!("{pod} log line {n} (from {replica})\n");
            if tx.send(Bytes::from(line)).await.is_err() || (!follow && n >= 3) {
                return;
            }
            if n >= 3 {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
    }));
    let mut reply = Reply::new(StatusCode::OK, Bytes::new()).header("content-type", "text/plain");
    reply.stream = Some(BodyExt::boxed(body));
    reply
}

/// Which standard streams an exec asked for.
#[derive(Debug, Clone, Copy)]
struct Streams {
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

enum Session {
    Exec {
        command: Vec<String>,
        io: Streams,
        pod: String,
    },
    PortForward,
}

fn header<'a>(req: &'a Request<Incoming>, name: &str) -> &'a str {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Answers an upgrade request with 101 and runs the session on the upgraded connection.
fn session(mut req: Request<Incoming>, session: Session) -> Reply {
    let upgrade = header(&req, "upgrade").to_ascii_lowercase();
    let offered = |h: &str| -> Vec<String> {
        req.headers()
            .get_all(h)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|p| p.trim().to_string())
            .collect()
    };
    if upgrade == "websocket" {
        let Session::Exec { .. } = session else {
            // The port-forward WebSocket tunnel is not offered: kubectl falls back to SPDY.
            return respond::status(
                400,
                "BadRequest",
                "websocket port-forward tunnel not supported",
                None,
            );
        };
        let protocols = offered("sec-websocket-protocol");
        let Some(chosen) = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
            .into_iter()
            .find(|p| protocols.iter().any(|o| o == p))
        else {
            return respond::status(400, "BadRequest", "no supported channel protocol", None);
        };
        let accept = derive_accept_key(header(&req, "sec-websocket-key").as_bytes());
        let upgraded = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            match upgraded.await {
                Ok(io) => {
                    let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, None)
                        .await;
                    if let Session::Exec { command, io, pod } = session {
                        exec_websocket(ws, chosen == "v5.channel.k8s.io", command, io, pod).await;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "websocket upgrade failed"),
            }
        });
        return Reply::new(StatusCode::SWITCHING_PROTOCOLS, Bytes::new())
            .header("upgrade", "websocket")
            .header("connection", "Upgrade")
            .header("sec-websocket-accept", &accept)
            .header("sec-websocket-protocol", chosen);
    }
    if upgrade != "spdy/3.1" {
        return respond::status(400, "BadRequest", "unknown upgrade", None);
    }
    let versions = offered("x-stream-protocol-version");
    let supported: &[&str] = match session {
        Session::Exec { .. } => &[
            "v4.channel.k8s.io",
            "v3.channel.k8s.io",
            "v2.channel.k8s.io",
        ],
        Session::PortForward => &["portforward.k8s.io"],
    };
    let Some(chosen) = supported
        .iter()
        .find(|p| versions.iter().any(|o| o == *p))
        .copied()
    else {
        return respond::status(400, "BadRequest", "no supported stream protocol", None);
    };
    let upgraded = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let io = match upgraded.await {
            Ok(io) => TokioIo::new(io),
            Err(e) => {
                tracing::debug!(error = %e, "SPDY upgrade failed");
                return;
            }
        };
        let (opened_tx, opened_rx) = mpsc::channel(16);
        let (closer_tx, closer_rx) = tokio::sync::oneshot::channel();
        let serving = tokio::spawn(spdy::serve(io, opened_tx, closer_tx));
        let Ok(closer) = closer_rx.await else { return };
        match session {
            Session::Exec { command, io, pod } => {
                exec_spdy(opened_rx, chosen == "v4.channel.k8s.io", command, io, pod).await;
                closer.close();
            }
            Session::PortForward => port_forward(opened_rx).await,
        }
        let _ = serving.await;
    });
    Reply::new(StatusCode::SWITCHING_PROTOCOLS, Bytes::new())
        .header("upgrade", "SPDY/3.1")
        .header("connection", "Upgrade")
        .header("x-stream-protocol-version", chosen)
}

/// Which output stream a chunk of process output goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Stdout,
    Stderr,
}

/// How the fake process ended.
enum Exit {
    Code(i32),
    NotFound(String),
}

/// Runs the fake container process: `stdin` until it ends, output to `out`.
async fn run(
    command: &[String],
    pod: &str,
    mut stdin: Option<mpsc::Receiver<Bytes>>,
    out: mpsc::Sender<(Out, Bytes)>,
) -> Exit {
    let send = |s: String| {
        let out = out.clone();
        async move {
            let _ = out.send((Out::Stdout, Bytes::from(s))).await;
        }
    };
    match command
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["cat"] => {
            if let Some(rx) = stdin.as_mut() {
                while let Some(chunk) = rx.recv().await {
                    if out.send((Out::Stdout, chunk)).await.is_err() {
                        break;
                    }
                }
            }
            Exit::Code(0)
        }
        ["echo", args @ ..] => {
            send(format!("{}\n", args.join(" "))).await;
            Exit::Code(0)
        }
        ["hostname"] => {
            send(format!("{pod}\n")).await;
            Exit::Code(0)
        }
        ["true"] => Exit::Code(0),
        ["false"] => Exit::Code(1),
        ["sh", "-c", script] => match script.strip_prefix("exit ").map(str::trim) {
            Some(n) => Exit::Code(n.parse().unwrap_or(1)),
            None => {
                let _ = out
                    .send((
                        Out::Stderr,
                        Bytes::from(format!("sh: {script}: not supported by the simulator\n")),
                    ))
                    .await;
                Exit::Code(127)
            }
        },
        [program, ..] => Exit::NotFound((*program).to_string()),
        [] => Exit::NotFound(String::new()),
    }
}

/// The `Status` an exec ends with on its error channel (protocol v4 and later).
fn exit_status(command: &[String], exit: &Exit) -> Value {
    match exit {
        Exit::Code(0) => json!({"metadata": {}, "status": "Success"}),
        Exit::Code(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Exit::NotFound(program) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("failed to exec in container: exec: \"{program}\": executable file not found in $PATH"),
            "reason": "InternalError",
        }),
    }
}

/// exec over WebSocket: messages carry a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error,
/// 4 resize; in v5, 255 closes the channel named by the next byte).
async fn exec_websocket<S>(
    ws: WebSocketStream<S>,
    v5: bool,
    command: Vec<String>,
    io: Streams,
    pod: String,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut source) = ws.split();
    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(16);
    let reader = tokio::spawn(async move {
        let mut stdin_tx = Some(stdin_tx);
        while let Some(Ok(msg)) = source.next().await {
            let data = match msg {
                Message::Binary(d) => d,
                Message::Close(_) => break,
                _ => continue,
            };
            match data.first() {
                Some(0) => {
                    if let Some(tx) = &stdin_tx {
                        let _ = tx.send(data.slice(1..)).await;
                    }
                }
                // v5's close signal for stdin.
                Some(255) if v5 && data.get(1) == Some(&0) => stdin_tx = None,
                _ => {}
            }
        }
    });
    let (out_tx, mut out_rx) = mpsc::channel::<(Out, Bytes)>(16);
    let process = {
        let command = command.clone();
        tokio::spawn(async move { run(&command, &pod, io.stdin.then_some(stdin_rx), out_tx).await })
    };
    while let Some((which, chunk)) = out_rx.recv().await {
        let channel = match which {
            Out::Stdout if io.stdout => 1u8,
            Out::Stderr if io.stderr => 2,
            _ => continue,
        };
        let mut frame = Vec::with_capacity(chunk.len() + 1);
        frame.push(channel);
        frame.extend_from_slice(&chunk);
        if sink.send(Message::Binary(frame.into())).await.is_err() {
            break;
        }
    }
    let exit = process.await.unwrap_or(Exit::Code(1));
    let mut status = vec![3u8];
    status.extend_from_slice(&serde_json::to_vec(&exit_status(&command, &exit)).expect("json"));
    let _ = sink.send(Message::Binary(status.into())).await;
    // A normal closure (1000): clients treat a close without a code as an error.
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    reader.abort();
}

/// exec over SPDY: the client opens one stream per standard stream it asked for, plus `error`.
async fn exec_spdy(
    mut opened: mpsc::Receiver<spdy::Opened>,
    v4: bool,
    command: Vec<String>,
    io: Streams,
    pod: String,
) {
    let wanted = 1 + io.stdin as usize + io.stdout as usize + io.stderr as usize;
    let mut streams: HashMap<String, spdy::Opened> = HashMap::new();
    let deadline = tokio::time::sleep(STREAMS_WAIT);
    tokio::pin!(deadline);
    while streams.len() < wanted {
        tokio::select! {
            s = opened.recv() => match s {
                Some(s) => {
                    let kind = s.header("streamtype").unwrap_or("").to_string();
                    streams.insert(kind, s);
                }
                None => return,
            },
            _ = &mut deadline => {
                tracing::debug!("exec: the client did not open its streams in time");
                return;
            }
        }
    }
    let stdin = streams.remove("stdin").map(|s| s.data);
    let (out_tx, mut out_rx) = mpsc::channel::<(Out, Bytes)>(16);
    let process = {
        let command = command.clone();
        tokio::spawn(async move { run(&command, &pod, stdin, out_tx).await })
    };
    while let Some((which, chunk)) = out_rx.recv().await {
        let name = match which {
            Out::Stdout => "stdout",
            Out::Stderr => "stderr",
        };
        if let Some(s) = streams.get(name) {
            s.out.send(&chunk);
        }
    }
    let exit = process.await.unwrap_or(Exit::Code(1));
    if let Some(error) = streams.get("error") {
        let body = if v4 {
            serde_json::to_vec(&exit_status(&command, &exit)).expect("json")
        } else {
            match &exit {
                Exit::Code(0) => Vec::new(),
                other => exit_status(&command, other)["message"]
                    .as_str()
                    .unwrap_or("")
                    .as_bytes()
                    .to_vec(),
            }
        };
        if !body.is_empty() {
            error.out.send(&body);
        }
    }
    for s in streams.values() {
        s.out.finish();
    }
}

/// port-forward over SPDY: each forwarded connection is an `error` and a `data` stream sharing
/// a `requestid`; the simulated container echoes the data stream.
async fn port_forward(mut opened: mpsc::Receiver<spdy::Opened>) {
    let mut errors: HashMap<String, spdy::StreamWriter> = HashMap::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    loop {
        tokio::select! {
            s = opened.recv() => {
                let Some(mut s) = s else { return };
                let request = s.header("requestid").unwrap_or("").to_string();
                match s.header("streamtype") {
                    Some("error") => {
                        errors.insert(request, s.out.clone());
                    }
                    Some("data") => {
                        let done = done_tx.clone();
                        tokio::spawn(async move {
                            while let Some(chunk) = s.data.recv().await {
                                if !s.out.send(&chunk) {
                                    break;
                                }
                            }
                            s.out.finish();
                            let _ = done.send(request);
                        });
                    }
                    _ => s.out.finish(),
                }
            }
            Some(request) = done_rx.recv() => {
                if let Some(error) = errors.remove(&request) {
                    error.finish();
                }
            }
        }
    }
}
