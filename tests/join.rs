//! Joined reads (`terminate.join_reads`): real `kubegate` and `kubegate-sim` processes over
//! one etcd, the replicas slowed (every API request takes 200–300 ms) so that reads sent at
//! once overlap, as they do when a fleet of clients starts together.
//!
//! 1. `identical_lists_of_one_sender_reach_the_replicas_a_few_times`
//! 2. `consistent_lists_after_writes_each_see_their_own_write`
//! 3. `no_answer_crosses_identities_selectors_encodings_or_resource_versions`
//! 4. `identical_watches_are_fed_from_one_upstream_watch_across_a_restart`
//! 5. `reads_of_different_senders_join_once_a_review_allows_each`
//! 6. `identical_watch_lists_share_their_initial_events`

use kubegate_e2e::*;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
const AGENT: &str = "join-test/1";

/// Two replicas over one etcd behind kubegate in terminate mode, reads joined, the access log
/// on; each replica answers every API request after `latency_ms`.
fn joining(latency_ms: u64) -> Started {
    joining_with(latency_ms, |_| {})
}

/// [`joining`], its configuration changed by `more` too.
fn joining_with(latency_ms: u64, more: impl FnOnce(&mut KubegateConfig) + 'static) -> Started {
    let bed = Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .tokens(DEV_TOKENS)
        .configure(|cfg| {
            cfg.terminate.join_reads.enabled = true;
            cfg.terminate.access_log.format = kubegate_config::AccessLogFormat::Json;
            cfg.terminate.access_log.max_per_second = 100_000;
        })
        .configure(more)
        .start();
    for s in &bed.sims {
        s.set_latency_ms(latency_ms);
    }
    bed
}

/// SubjectAccessReviews both replicas answered so far.
fn access_reviews(bed: &Started) -> u64 {
    bed.sims.iter().map(Sim::access_reviews_received).sum()
}

/// A read of `path` by `user`, sent now: its answer to come, once it is in flight at a
/// replica.
async fn read_in_flight(
    bed: &Started,
    user: &str,
    path: &str,
) -> tokio::task::JoinHandle<Response> {
    let mut conn = connections_as(bed, user, 1).await.pop().unwrap();
    let path = path.to_string();
    let lead = tokio::spawn(async move { conn.get(&path).await.unwrap() });
    wait_for(&format!("{user}'s read in flight"), T, || {
        (bed.kg.metric_sum("kubegate_backend_requests_in_flight") >= 1.0).then_some(())
    });
    lead
}

/// LISTs both replicas received so far.
fn lists(bed: &Started) -> u64 {
    bed.sims.iter().map(Sim::lists_received).sum()
}

/// `n` HTTP/2 connections through kubegate as `user` of `system:masters` (one certificate).
async fn connections_as(bed: &Started, user: &str, n: usize) -> Vec<Conn> {
    let (crt, key) = bed.pki.client_in(user, user, &["system:masters"]);
    connections(bed, Some((&crt, &key)), n).await
}

/// `n` HTTP/2 connections without a client certificate.
async fn anonymous_connections(bed: &Started, n: usize) -> Vec<Conn> {
    connections(bed, None, n).await
}

/// `n` HTTP/2 connections, with the client certificate and key `cert` when given.
async fn connections(bed: &Started, cert: Option<(&Path, &Path)>, n: usize) -> Vec<Conn> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let conn = match cert {
            Some((crt, key)) => Conn::open_as(bed.kg.listen, &bed.pki, true, crt, key).await,
            None => Conn::open_anonymous(bed.kg.listen, &bed.pki, true).await,
        };
        conns.push(conn.unwrap());
    }
    conns
}

/// Runs `each` on every connection at once; their answers, in order.
async fn all_at_once<F, Fut>(conns: Vec<Conn>, each: F) -> Vec<Response>
where
    F: Fn(usize, Conn) -> Fut,
    Fut: Future<Output = Response> + Send + 'static,
{
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(each(i, c)))
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Creates configmap `name` with label `app=label`.
async fn create(conn: &mut Conn, name: &str, label: &str) {
    let body = format!(r#"{{"metadata":{{"name":"{name}","labels":{{"app":"{label}"}}}}}}"#);
    let r = conn.post(CONFIGMAPS, &body).await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
}

/// The names of a list's items.
fn names(r: &Response) -> HashSet<String> {
    let list = r.json();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_lists_of_one_sender_reach_the_replicas_a_few_times() {
    let bed = joining(300);
    let mut admin = connections_as(&bed, "admin", 1).await.pop().unwrap();
    for (i, label) in ["a", "b", "a"].iter().enumerate() {
        create(&mut admin, &format!("cm-{i}"), label).await;
    }
    let want: HashSet<String> = (0..3).map(|i| format!("cm-{i}")).collect();

    // 100 consistent LISTs at once: the first goes, those arriving while it is in flight go
    // together once it has answered.
    for query in ["", "?resourceVersion=0"] {
        let conns = connections_as(&bed, "alice", 100).await;
        let before = lists(&bed);
        let path = format!("{CONFIGMAPS}{query}");
        let answers = all_at_once(conns, |_, mut c| {
            let path = path.clone();
            async move {
                let agent = [("User-Agent", AGENT)];
                c.send("GET", &path, &agent, None).await.unwrap()
            }
        })
        .await;
        // A few: the first, and those arriving while one is in flight together (a loaded
        // machine spreads the arrivals over more of them; 1 or 2 is what a quiet one sees).
        let sent = lists(&bed) - before;
        assert!(
            sent <= 10,
            "{query:?}: 100 LISTs reached the replicas {sent} times"
        );
        let first = &answers[0];
        for r in &answers {
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.body, first.body, "every client gets the same bytes");
            assert_eq!(names(r), want);
        }
    }
    let joined = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#);
    assert!(joined >= 180.0, "{joined}");
    assert_eq!(bed.kg.metric("kubegate_join_held_bytes"), 0.0);

    // The access log names every client answered from a shared read, and the upstream
    // request's audit ID that ties it to the apiserver's audit event.
    let lines = wait_for("200 access log lines", T, || {
        let lines = bed.kg.access_lines(AGENT);
        (lines.len() >= 200).then_some(lines)
    });
    let joined_lines: Vec<_> = lines.iter().filter(|l| l["shared"] == "joined").collect();
    assert!(joined_lines.len() >= 180, "{}", joined_lines.len());
    let led: HashSet<&str> = lines
        .iter()
        .filter(|l| l["shared"] == "led")
        .map(|l| l["audit_id"].as_str().unwrap())
        .collect();
    for l in joined_lines {
        assert_eq!(l["user"], "alice", "{l}");
        assert!(
            led.contains(l["audit_id"].as_str().unwrap()),
            "a joined line names a led request's audit ID: {l}"
        );
    }

    // Meanwhile, others asking the same get their own answers: anonymous 403, a bogus token
    // 401, never the data.
    let alice = connections_as(&bed, "alice", 40).await;
    let strangers = anonymous_connections(&bed, 40).await;
    let all: Vec<Conn> = alice.into_iter().chain(strangers).collect();
    let answers = all_at_once(all, |i, mut c| async move {
        match i {
            0..40 => c.get(CONFIGMAPS).await.unwrap(),
            40..60 => c.get(CONFIGMAPS).await.unwrap(),
            _ => c
                .get_with_token(CONFIGMAPS, "bogus", "stranger/1")
                .await
                .unwrap(),
        }
    })
    .await;
    for (i, r) in answers.iter().enumerate() {
        let expected = match i {
            0..40 => 200,
            40..60 => 403,
            _ => 401,
        };
        assert_eq!(r.status, expected, "{i}: {}", r.text());
        if expected != 200 {
            assert!(!r.text().contains("cm-0"), "{i}: {}", r.text());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_lists_after_writes_each_see_their_own_write() {
    let bed = joining(200);
    let conns = connections_as(&bed, "alice", 100).await;
    let before = lists(&bed);
    let answers = all_at_once(conns, |i, mut c| async move {
        create(&mut c, &format!("mine-{i}"), "a").await;
        c.get(CONFIGMAPS).await.unwrap()
    })
    .await;
    for (i, r) in answers.iter().enumerate() {
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            names(r).contains(&format!("mine-{i}")),
            "client {i} does not see its own write"
        );
    }
    let sent = lists(&bed) - before;
    assert!(sent < 50, "100 LISTs reached the replicas {sent} times");
    let joined = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#);
    assert_eq!(joined + sent as f64, 100.0, "each LIST went or joined");
}

/// Who asks: a certificate's user, a token, nobody, a token the replicas do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    Alice,
    Bob,
    TokenA,
    TokenB,
    Anonymous,
    Bogus,
}

const WHO: [Who; 6] = [
    Who::Alice,
    Who::Bob,
    Who::TokenA,
    Who::TokenB,
    Who::Anonymous,
    Who::Bogus,
];
const SELECTORS: [&str; 3] = ["", "labelSelector=app%3Da", "labelSelector=app%3Db"];
const ENCODINGS: [(&str, &str); 3] = [
    ("application/json", ""),
    ("application/json", "gzip"),
    ("application/json;as=Table;v=v1;g=meta.k8s.io", ""),
];
const VERSIONS: [&str; 2] = ["", "resourceVersion=0"];

/// One request of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Ask {
    who: Who,
    selector: usize,
    encoding: usize,
    version: usize,
}

impl Ask {
    fn path(&self) -> String {
        let q: Vec<&str> = [SELECTORS[self.selector], VERSIONS[self.version]]
            .into_iter()
            .filter(|q| !q.is_empty())
            .collect();
        if q.is_empty() {
            CONFIGMAPS.to_string()
        } else {
            format!("{CONFIGMAPS}?{}", q.join("&"))
        }
    }

    async fn send(self, conn: &mut Conn) -> Response {
        let (accept, encoding) = ENCODINGS[self.encoding];
        let mut headers = vec![("Accept", accept), ("User-Agent", AGENT)];
        if !encoding.is_empty() {
            headers.push(("Accept-Encoding", encoding));
        }
        match self.who {
            Who::TokenA => headers.push(("Authorization", "Bearer tok-a")),
            Who::TokenB => headers.push(("Authorization", "Bearer tok-b")),
            Who::Bogus => headers.push(("Authorization", "Bearer bogus")),
            _ => {}
        }
        conn.send("GET", &self.path(), &headers, None)
            .await
            .unwrap()
    }
}

/// A connection through `bed`'s kubegate for `who`.
async fn connection_for(
    bed: &Started,
    who: Who,
    certs: &HashMap<Who, (std::path::PathBuf, std::path::PathBuf)>,
) -> Conn {
    let cert = certs
        .get(&who)
        .map(|(crt, key)| (crt.as_path(), key.as_path()));
    connections(bed, cert, 1).await.remove(0)
}

/// What a client can tell of an answer: its status, how it is encoded, who the replica
/// answered (the simulator's `X-Kubegate-Sim-User`) and its body — less what moves between
/// two reads of an unchanged list: the list's resourceVersion (the replicas' own writes move
/// etcd's revision) and a Table's ages (the clock).
fn seen(r: &Response) -> (u16, Option<String>, Option<String>, Option<String>, String) {
    let header = |n: &str| r.header(n).map(str::to_string);
    let content = match serde_json::from_slice::<serde_json::Value>(&r.body) {
        Ok(mut v) => {
            if let Some(meta) = v["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
            }
            for row in v["rows"].as_array_mut().into_iter().flatten() {
                row["cells"][2] = serde_json::Value::Null;
            }
            v.to_string()
        }
        Err(_) => r.text(),
    };
    (
        r.status,
        header("content-type"),
        header("content-encoding"),
        header("x-kubegate-sim-user"),
        content,
    )
}

/// 240 requests drawn at random from identities × selectors × encodings × resourceVersions,
/// sent at once (many join), each answer compared with what the same request gets alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_crosses_identities_selectors_encodings_or_resource_versions() {
    let bed = joining(250);
    let mut admin = connections_as(&bed, "admin", 1).await.pop().unwrap();
    for (i, label) in ["a", "b", "a", "c"].iter().enumerate() {
        create(&mut admin, &format!("cm-{i}"), label).await;
    }
    let certs: HashMap<Who, _> = [(Who::Alice, "alice"), (Who::Bob, "bob")]
        .into_iter()
        .map(|(w, user)| (w, bed.pki.client_in(user, user, &["system:masters"])))
        .collect();
    // A fixed seed: the same draw every run, and a failure names the ask that crossed.
    let mut rng = fastrand::Rng::with_seed(47);
    let asks: Vec<Ask> = (0..240)
        .map(|_| Ask {
            who: WHO[rng.usize(..WHO.len())],
            selector: rng.usize(..SELECTORS.len()),
            encoding: rng.usize(..ENCODINGS.len()),
            version: rng.usize(..VERSIONS.len()),
        })
        .collect();
    let mut conns = Vec::with_capacity(asks.len());
    for a in &asks {
        conns.push(connection_for(&bed, a.who, &certs).await);
    }
    let joined_before = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#);
    let at_once = {
        let asks = asks.clone();
        all_at_once(conns, move |i, mut c| {
            let ask = asks[i];
            async move { ask.send(&mut c).await }
        })
        .await
    };
    let joined = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#)
        - joined_before;
    assert!(joined >= 40.0, "the draw joined only {joined} reads");

    // Each distinct ask once more, alone: nothing is in flight to join.
    let mut alone: HashMap<Ask, Response> = HashMap::new();
    for a in &asks {
        if !alone.contains_key(a) {
            let mut c = connection_for(&bed, a.who, &certs).await;
            alone.insert(*a, a.send(&mut c).await);
        }
    }
    for (a, r) in asks.iter().zip(&at_once) {
        let (status, user) = match a.who {
            Who::Alice => (200, Some("alice")),
            Who::Bob => (200, Some("bob")),
            Who::TokenA => (200, Some("token-user-a")),
            Who::TokenB => (200, Some("token-user-b")),
            Who::Anonymous => (403, Some("system:anonymous")),
            Who::Bogus => (401, None),
        };
        assert_eq!(r.status, status, "{a:?}: {}", r.text());
        assert_eq!(r.header("x-kubegate-sim-user"), user, "{a:?}");
        assert!(
            seen(r) == seen(&alone[a]),
            "{a:?} got another request's answer: {:?} / alone {:?}",
            seen(r),
            seen(&alone[a])
        );
    }
}

/// 50 informers' watches of one sender, from one position, fed from one upstream watch
/// (`terminate.shared_watches`): each hears every change in order, through a restart of the
/// replica the shared watch is on; another sender's watch is its own; a client's own
/// `timeoutSeconds` ends its stream alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_watches_are_fed_from_one_upstream_watch_across_a_restart() {
    let mut bed = Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .configure(|cfg| {
            cfg.terminate.shared_watches.enabled = true;
            cfg.terminate.access_log.format = kubegate_config::AccessLogFormat::Json;
        })
        .start();
    let mut admin = connections_as(&bed, "admin", 1).await.pop().unwrap();
    create(&mut admin, "cm-0", "a").await;
    let rv = admin.get(CONFIGMAPS).await.unwrap().resource_version();
    let watches = |bed: &Started| -> u64 { bed.sims.iter().map(Sim::watches_received).sum() };
    let before = watches(&bed);

    let path = |timeout: u32| {
        format!("{CONFIGMAPS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds={timeout}")
    };
    let mut conns = connections_as(&bed, "alice", 50).await;
    let mut streams = Vec::new();
    for c in &mut conns {
        let s = c.stream(&path(300)).await.unwrap();
        assert_eq!(s.status, 200);
        streams.push(s);
    }
    assert_eq!(watches(&bed) - before, 1, "one upstream watch for 50");
    let kg = &bed.kg;
    assert_eq!(kg.metric("kubegate_shared_watches"), 50.0);
    assert_eq!(kg.metric("kubegate_shared_watch_feeds"), 1.0);
    // Another sender: a watch of its own.
    let mut bob = connections_as(&bed, "bob", 1).await.pop().unwrap();
    let mut bobs = bob.stream(&path(300)).await.unwrap();
    assert_eq!(watches(&bed) - before, 2);
    // A client whose time is short: its stream ends, the others' go on.
    let mut brief_conn = connections_as(&bed, "alice", 1).await.pop().unwrap();
    let mut brief = brief_conn.stream(&path(2)).await.unwrap();
    assert_eq!(watches(&bed) - before, 2, "fed too");

    /// Reads `s` until the ADDED event of `name` (bookmarks may come before it).
    async fn added(s: &mut Lines, name: &str) {
        loop {
            let e = s.next_json(T).await;
            match e["type"].as_str() {
                Some("BOOKMARK") => continue,
                Some("ADDED") => {
                    assert_eq!(e["object"]["metadata"]["name"], name, "{e}");
                    return;
                }
                _ => panic!("{name}: {e}"),
            }
        }
    }
    for i in 1..=3 {
        let name = format!("cm-{i}");
        create(&mut admin, &name, "a").await;
        for s in streams.iter_mut().chain([&mut bobs]) {
            added(s, &name).await;
        }
    }
    // The brief watch ends cleanly at its own time (what it heard before, it heard).
    let started = std::time::Instant::now();
    while brief.next(T).await.unwrap().is_some() {}
    assert!(started.elapsed() < Duration::from_secs(30));
    let line = wait_for("the brief watch's access log line", T, || {
        bed.kg
            .access_lines("")
            .into_iter()
            .find(|l| l["shared"] == "fed" && l["verb"] == "watch")
    });
    assert_eq!(line["user"], "alice", "{line}");
    assert!(
        line["audit_id"].as_str().is_some_and(|a| a.len() == 36),
        "{line}"
    );

    // The replica holding the shared watch restarts: the feed moves, its clients hear on.
    let holder = bed
        .sims
        .iter()
        .position(|s| s.watches_open() > 0)
        .expect("a replica holds the watches");
    bed.sims[holder].restart();
    create(&mut admin, "cm-after", "a").await;
    for s in streams.iter_mut() {
        added(s, "cm-after").await;
    }
    // The restarted replica counts from 0 again: an upper bound of what reached both.
    let upstream = watches(&bed).saturating_sub(before);
    assert!(upstream <= 6, "{upstream} upstream watches for 52 clients");
    assert_eq!(bed.kg.metric("kubegate_shared_watch_feeds"), 2.0);
}

/// Sharing across senders (`across_senders`): 100 LISTs of five senders reach the replicas a
/// few times, a review for each sender that joined another's; a sender the replicas forbid
/// (mallory) and anonymous clients get their own 403 while an allowed read is in flight, and
/// a forbidden sender's 403 is never taken by the allowed reads that joined it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_different_senders_join_once_a_review_allows_each() {
    let bed = Cluster::new()
        .replicas(2)
        .etcd()
        .terminate()
        .tokens(DEV_TOKENS)
        // The replicas' RBAC binds mallory no role on configmaps.
        .sim_args(&["--authorization-forbid", "mallory:configmaps"])
        .configure(|cfg| {
            cfg.terminate.join_reads.enabled = true;
            cfg.terminate.join_reads.across_senders = true;
            // Nothing of kubegate's own in flight later but what the test sends: the replicas'
            // versions are read once, when they become ready.
            cfg.terminate.version_skew.refresh = Duration::from_secs(3600);
            cfg.terminate.access_log.format = kubegate_config::AccessLogFormat::Json;
            cfg.terminate.access_log.max_per_second = 100_000;
            // Reviews answered after the replicas' latency (up to 3 s below) and remembered
            // for the whole test.
            cfg.terminate.access_review.timeout = Duration::from_secs(5);
            cfg.terminate.access_review.ttl = Duration::from_secs(300);
        })
        .start();
    for s in &bed.sims {
        s.set_latency_ms(300);
    }
    let mut admin = connections_as(&bed, "admin", 1).await.pop().unwrap();
    for i in 0..3 {
        create(&mut admin, &format!("cm-{i}"), "a").await;
    }
    let want: HashSet<String> = (0..3).map(|i| format!("cm-{i}")).collect();
    let path = format!("{CONFIGMAPS}?resourceVersion=0");

    // Five senders — three certificates' users, two tokens' — 20 LISTs each, all at once.
    let mut conns = Vec::new();
    for user in ["alice", "bob", "carol"] {
        conns.extend(connections_as(&bed, user, 20).await);
    }
    conns.extend(anonymous_connections(&bed, 40).await);
    let before = lists(&bed);
    let answers = all_at_once(conns, |i, mut c| {
        let path = path.clone();
        async move {
            let token = match i {
                60..80 => Some("Bearer tok-a"),
                80.. => Some("Bearer tok-b"),
                _ => None,
            };
            let mut headers = vec![("User-Agent", AGENT)];
            headers.extend(token.map(|t| ("Authorization", t)));
            c.send("GET", &path, &headers, None).await.unwrap()
        }
    })
    .await;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(names(r), want);
    }
    // Each sender needs one review at most (a review's answer is kept, and requests waiting
    // on one do not send another); the sender whose read went first needs none.
    let sent = lists(&bed) - before;
    assert!(
        sent <= 10,
        "100 LISTs of 5 senders reached the replicas {sent} times"
    );
    let reviews = access_reviews(&bed);
    assert!((1..=5).contains(&reviews), "{reviews} reviews");
    let allowed = bed
        .kg
        .metric(r#"kubegate_access_reviews_total{result="allowed"}"#);
    assert!(allowed >= 1.0, "{allowed}");
    let joined = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#);
    assert_eq!(joined + sent as f64, 100.0, "each LIST went or joined");
    // The access log names each client's own sender, joined or not.
    let lines = wait_for("100 access log lines", T, || {
        let lines = bed.kg.access_lines(AGENT);
        (lines.len() >= 100).then_some(lines)
    });
    let users: HashSet<&str> = lines
        .iter()
        .filter(|l| l["shared"] == "joined")
        .map(|l| l["user"].as_str().unwrap_or_default())
        .collect();
    assert!(
        users.len() >= 2,
        "joined reads of several senders: {users:?}"
    );

    // A read in flight for alice (the replicas slowed further, so it is in flight for
    // seconds); then mallory, whom the replicas do not authorize, and anonymous clients ask
    // the same: a review denies mallory, so each gets its own 403, never the list.
    for s in &bed.sims {
        s.set_latency_ms(3000);
    }
    let lead = read_in_flight(&bed, "alice", &path).await;
    let mut others = connections_as(&bed, "mallory", 10).await;
    others.extend(anonymous_connections(&bed, 10).await);
    let answers = all_at_once(others, |_, mut c| {
        let path = path.clone();
        async move { c.get(&path).await.unwrap() }
    })
    .await;
    for (i, r) in answers.iter().enumerate() {
        assert_eq!(r.status, 403, "{i}: {}", r.text());
        let who = if i < 10 {
            "mallory"
        } else {
            "system:anonymous"
        };
        assert!(
            // The apiserver's Status, its message quoting the user JSON-escaped.
            r.text().contains(&format!(r#"User \"{who}\""#)),
            "{i}: {}",
            r.text()
        );
        assert!(!r.text().contains("cm-0"), "{i}: {}", r.text());
    }
    let lead = lead.await.unwrap();
    assert_eq!(lead.status, 200, "{}", lead.text());
    assert_eq!(names(&lead), want);
    wait_for("mallory's review denied", T, || {
        let denied = bed
            .kg
            .metric(r#"kubegate_access_reviews_total{result="denied"}"#);
        (denied >= 1.0).then_some(())
    });

    // The other way round: mallory's read in flight, and alice's join it (she may read the
    // same). Mallory's 403 is not hers: her reads go on without it, get the list, and only
    // the reads that took another's answer count as joined. Alice's review first, while a
    // read of bob's is in flight, so that hers join mallory's at once.
    for s in &bed.sims {
        s.set_latency_ms(1000);
    }
    let lead = read_in_flight(&bed, "bob", &path).await;
    let mut alice = connections_as(&bed, "alice", 1).await.pop().unwrap();
    assert_eq!(alice.get(&path).await.unwrap().status, 200);
    assert_eq!(lead.await.unwrap().status, 200);
    for s in &bed.sims {
        s.set_latency_ms(3000);
    }
    let (lists_before, joined_before) = (
        lists(&bed),
        bed.kg
            .metric(r#"kubegate_reads_joined_total{cluster="default"}"#),
    );
    let lead = read_in_flight(&bed, "mallory", &path).await;
    let answers = all_at_once(connections_as(&bed, "alice", 10).await, |_, mut c| {
        let path = path.clone();
        async move { c.get(&path).await.unwrap() }
    })
    .await;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(names(r), want);
    }
    let lead = lead.await.unwrap();
    assert_eq!(lead.status, 403, "{}", lead.text());
    let sent = lists(&bed) - lists_before;
    let joined = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#)
        - joined_before;
    assert_eq!(
        joined + sent as f64,
        10.0,
        "each of alice's 10 LISTs went or joined, once ({sent} went; mallory's 403 is no LIST)"
    );
}

/// Identical watch-lists of one sender — client-go's informers start so since 1.35 — each
/// with its own `timeoutSeconds`, all at once, shared watches on too: their initial syncs
/// reach the replicas a few times; every client gets every object and the bookmark that ends
/// them, then watches on from there, fed from a shared watch (a write after is heard by each);
/// anonymous clients asking the same get their own 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_watch_lists_share_their_initial_events() {
    let bed = joining_with(300, |cfg| cfg.terminate.shared_watches.enabled = true);
    let mut admin = connections_as(&bed, "admin", 1).await.pop().unwrap();
    for i in 0..5 {
        create(&mut admin, &format!("cm-{i}"), "a").await;
    }
    let want: HashSet<String> = (0..5).map(|i| format!("cm-{i}")).collect();
    let synced = |bed: &Started| -> u64 { bed.sims.iter().map(Sim::watch_lists_received).sum() };
    let watches = |bed: &Started| -> u64 { bed.sims.iter().map(Sim::watches_received).sum() };
    let (before, watches_before) = (synced(&bed), watches(&bed));
    let path = |timeout: usize| {
        format!(
            "{CONFIGMAPS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &allowWatchBookmarks=true&timeoutSeconds={timeout}"
        )
    };
    // Every stream opened at once, each with its connection (which must outlive it).
    let open_all = |conns: Vec<Conn>| async {
        let tasks: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                let path = path(300 + i);
                tokio::spawn(async move {
                    let s = c.stream(&path).await.unwrap();
                    (c, s)
                })
            })
            .collect();
        let mut streams = Vec::new();
        for t in tasks {
            streams.push(t.await.unwrap());
        }
        streams
    };
    let mut streams = open_all(connections_as(&bed, "alice", 30).await).await;
    let sent = synced(&bed) - before;
    // The first, then the ones that arrived while it was on its way (a consistent read's
    // twin, sent after the first's initial events); a loaded machine spreads the starts.
    let joined = bed
        .kg
        .metric(r#"kubegate_reads_joined_total{cluster="default"}"#);
    assert!(
        sent <= 10,
        "30 watch-lists of one sender reached the replicas {sent} times"
    );
    assert_eq!(joined + sent as f64, 30.0, "each went or joined");
    // The followers watch on from a shared watch, not each from its own.
    let upstream = watches(&bed) - watches_before;
    assert!(
        upstream <= sent + 4,
        "{upstream} upstream watches for 30 ({sent} watch-lists)"
    );
    for (i, (_, s)) in streams.iter_mut().enumerate() {
        assert_eq!(s.status, 200, "{i}");
        let mut names = HashSet::new();
        loop {
            let e = s.next_json(T).await;
            let end = &e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"];
            match e["type"].as_str() {
                Some("ADDED") => {
                    names.insert(
                        e["object"]["metadata"]["name"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                    );
                }
                Some("BOOKMARK") if end == "true" => break,
                Some("BOOKMARK") => {}
                _ => panic!("{i}: {e}"),
            }
        }
        assert_eq!(names, want, "{i}: the state, whole");
    }
    // Each watches on from where its initial events ended.
    create(&mut admin, "cm-after", "a").await;
    for (i, (_, s)) in streams.iter_mut().enumerate() {
        let e = loop {
            let e = s.next_json(T).await;
            if e["type"] != "BOOKMARK" {
                break e;
            }
        };
        assert_eq!(e["type"], "ADDED", "{i}: {e}");
        assert_eq!(e["object"]["metadata"]["name"], "cm-after", "{i}: {e}");
    }
    // Anonymous clients asking the same: their own 403 each, never the objects.
    let anonymous = anonymous_connections(&bed, 5).await;
    for (_, mut s) in open_all(anonymous).await {
        assert_eq!(s.status, 403);
        let text = s.next(T).await.unwrap().unwrap_or_default();
        assert!(text.contains(r#"User \"system:anonymous\""#), "{text}");
    }
}
