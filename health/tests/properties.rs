//! Properties of the `/readyz?verbose` parser over generated bodies: it never panics, and a
//! body written the way the apiserver writes it is read back exactly. `fuzz/` runs the same
//! entry point coverage-guided.

use kubegate_health::parse_verbose;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_body_parses_without_panic(body in any::<String>()) {
        let r = parse_verbose(&body);
        prop_assert!(r.failing.iter().all(|n| !n.is_empty() && !n.contains(char::is_whitespace)));
    }

    #[test]
    fn an_apiserver_body_reads_back_its_failing_checks(
        checks in prop::collection::vec(("(ping|log|etcd|shutdown|informer-sync|poststarthook/[a-z-]{1,20})", any::<bool>()), 0..25),
    ) {
        // As k8s.io/apiserver's healthz handler writes it.
        let mut body = String::new();
        for (name, ok) in &checks {
            if *ok {
                body.push_str(&format!("[+]{name} ok\n"));
            } else {
                body.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
        body.push_str(if checks.iter().all(|(_, ok)| *ok) { "readyz check passed\n" } else { "readyz check failed\n" });
        let r = parse_verbose(&body);
        let failing: Vec<String> = checks.iter().filter(|(_, ok)| !ok).map(|(n, _)| n.clone()).collect();
        prop_assert_eq!(&r.failing, &failing);
        prop_assert_eq!(r.shutting_down, failing.iter().any(|n| n == "shutdown"));
    }
}
