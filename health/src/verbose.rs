//! The body of `GET /readyz?verbose` as kube-apiserver writes it (k8s.io/apiserver
//! `healthz.go`):
//!
//! ```text
//! [+]ping ok
//! [-]shutdown failed: reason withheld
//! [+]poststarthook/x excluded: ok
//! readyz check failed
//! ```

/// What a verbose readyz body says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadyzReport {
    /// Names of the checks that failed (`[-]name ...`), in body order.
    pub failing: Vec<String>,
    /// The apiserver has started shutting down (`[-]shutdown`): authoritative, it will not
    /// become ready again in this process.
    pub shutting_down: bool,
}

/// Parses a verbose readyz/livez body. Unknown lines are ignored: newer apiservers may add
/// warnings, and the HTTP status stays the verdict.
pub fn parse_verbose(body: &str) -> ReadyzReport {
    let mut report = ReadyzReport::default();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("[-]") {
            let name = rest.split_whitespace().next().unwrap_or("").to_string();
            if name == "shutdown" {
                report.shutting_down = true;
            }
            if !name.is_empty() {
                report.failing.push(name);
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutting_down_apiserver() {
        let body = "[+]ping ok\n[+]log ok\n[+]etcd ok\n[-]shutdown failed: reason withheld\n[+]poststarthook/start-apiextensions-informers ok\nreadyz check failed";
        let r = parse_verbose(body);
        assert_eq!(r.failing, vec!["shutdown"]);
        assert!(r.shutting_down);
    }

    #[test]
    fn starting_apiserver_is_not_shutting_down() {
        let body = "[+]ping ok\n[-]poststarthook/storage-readiness failed: reason withheld\n[-]etcd failed: reason withheld\nreadyz check failed";
        let r = parse_verbose(body);
        assert_eq!(r.failing, vec!["poststarthook/storage-readiness", "etcd"]);
        assert!(!r.shutting_down);
    }

    #[test]
    fn passing_and_excluded_checks_and_warnings_are_not_failures() {
        let body = "[+]ping ok\n[+]etcd excluded: ok\nwarn: some health checks cannot be excluded: no matches for \"x\"\nreadyz check passed";
        let r = parse_verbose(body);
        assert!(r.failing.is_empty());
        assert!(!r.shutting_down);
    }

    #[test]
    fn terse_ok_body_has_no_checks() {
        assert_eq!(parse_verbose("ok"), ReadyzReport::default());
    }
}
