//! The admin endpoint's status page (`/`), loaded by a real browser (Debian's headless
//! Chromium) from a real kubegate in terminate mode in front of two replicas, while one
//! replica shuts down, exits and comes back: what the page shows at each step, that client
//! text (a hostile user agent) stays text, and that it renders (a screenshot).

use kubegate_e2e::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// The table row of `dom` that names `cell` in one of its cells.
fn row<'a>(dom: &'a str, cell: &str) -> &'a str {
    dom.split("<tr>")
        .find(|r| r.contains(&format!("<td>{cell}</td>")) || r.contains(&format!("<td>{cell} ")))
        .unwrap_or_else(|| panic!("no row for {cell} in {dom}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_a_replica_leave_and_return_in_a_browser() {
    let mut bed = Cluster::new()
        .replicas(2)
        .terminate()
        .tokens(&[("tok-ops", "ops-bot", "ops")])
        .sim_args(&["--shutdown-delay-duration", "20s"])
        .start();
    let browser = Browser::new(bed.dir.path());
    let url = format!("http://{}/", bed.kg.admin);
    let (kg, pki) = (&bed.kg, &bed.pki);

    // Traffic: a certificate user with a hostile user agent, a token client.
    let mut conn = Conn::open_as_user(kg.listen, pki, "dev", "dev-user", &["dev"]).await;
    let hostile = "<script>document.title='owned'</script><b>x";
    for _ in 0..5 {
        let r = conn
            .send("GET", CONFIGMAPS, &[("User-Agent", hostile)], None)
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }
    let mut token = Conn::open_anonymous(kg.listen, pki, false).await.unwrap();
    for _ in 0..2 {
        let r = token
            .get_with_token("/version", "tok-ops", "ops-bot/1.0")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }

    let dom = browser.dom(&url);
    assert!(dom.contains("<title>kubegate serving</title>"), "{dom}");
    assert!(
        !dom.contains("<script"),
        "the user agent became a script element: {dom}"
    );
    assert!(!dom.contains("<b>x"), "the user agent became markup");
    assert!(
        dom.contains("&lt;script&gt;document.title="),
        "the user agent is shown as text"
    );
    assert!(row(&dom, "replica-1").contains("state ready"), "{dom}");
    assert!(row(&dom, "replica-2").contains("state ready"), "{dom}");
    let listener = row(&dom, &kg.listen.to_string());
    assert!(listener.contains("<td>terminate</td>"), "{listener}");
    let dev = row(&dom, "dev-user");
    assert!(
        dev.contains("client certificate") && dev.contains(">5<"),
        "{dev}"
    );
    // The token client is named by a TokenReview, not shown by its address.
    assert!(row(&dom, "ops-bot").contains("bearer token"), "{dom}");
    assert!(row(&dom, "ops-bot/1.0").contains(">2<"), "{dom}");
    assert!(dom.contains("none since start") || dom.contains("Last transitions"));

    // replica-1 shuts down: while its shutdown delay runs it is out of rotation, and says why.
    bed.sims[0].signal(libc::SIGTERM);
    bed.kg.wait_state("replica-1", "not_ready", T);
    let dom = browser.dom(&url);
    let r1 = row(&dom, "replica-1");
    assert!(r1.contains("state not_ready"), "{r1}");
    assert!(r1.contains("shutting down"), "the page says why: {r1}");
    assert!(row(&dom, "replica-2").contains("state ready"));
    // The page renders (the screenshot in docs/operations.md is this one).
    let png = bed.dir.path().join("status.png");
    browser.screenshot(&url, &png, 1400, 1000);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        bytes.len() > 20_000,
        "a page with content, not a blank: {} bytes",
        bytes.len()
    );
    if let Some(keep) = std::env::var_os("KUBEGATE_STATUS_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }

    bed.sims[0].wait_exit(T);
    bed.kg.wait_state("replica-1", "down", T);
    let dom = browser.dom(&url);
    assert!(row(&dom, "replica-1").contains("state down"), "{dom}");
    assert!(
        dom.contains("[+]") || dom.contains("state pass"),
        "still ready with replica-2"
    );

    // It returns: ready again, and the transitions say what happened, newest first.
    bed.sims[0].restart();
    bed.kg.wait_state("replica-1", "ready", T);
    let dom = browser.dom(&url);
    assert!(row(&dom, "replica-1").contains("state ready"), "{dom}");
    let transitions = dom
        .split("Last transitions")
        .nth(1)
        .expect("a transitions table");
    let replica_1: Vec<Vec<&str>> = transitions
        .split("<tr>")
        .filter(|r| r.contains("<td>replica-1</td>"))
        .map(|r| {
            r.split("class=\"state ")
                .skip(1)
                .filter_map(|s| s.split('"').next())
                .collect()
        })
        .collect();
    assert_eq!(
        replica_1,
        [
            ["down", "ready"],
            ["not_ready", "down"],
            ["ready", "not_ready"],
            ["unknown", "ready"]
        ],
        "newest first"
    );
}
