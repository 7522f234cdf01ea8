//! Label selectors, as far as the simulator reads them: equality-based terms (`a=b`, `c==d`,
//! `e!=f`), existence (`k`) and non-existence (`!k`, as kube-proxy's
//! `!service.kubernetes.io/headless`), comma-joined; the LIST handler and the watch filter
//! both ask here.

use serde_json::Value;

/// Equality-based label selectors (`a=b,c==d,e!=f`); anything else matches everything.
/// Whether `obj`'s labels satisfy `selector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-joined).
pub fn matches_labels(obj: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    let labels = &obj["metadata"]["labels"];
    selector.split(',').all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k.trim()].as_str() != Some(v.trim())
        } else if let Some((k, v)) = term.split_once('=') {
            labels[k.trim()].as_str() == Some(v.trim_start_matches('=').trim())
        } else if let Some(k) = term.trim().strip_prefix('!') {
            labels.get(k.trim()).is_none()
        } else {
            labels.get(term.trim()).is_some()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terms_of_every_kind_are_read() {
        let headless =
            json!({"metadata": {"labels": {"service.kubernetes.io/headless": "", "app": "a"}}});
        let plain = json!({"metadata": {"labels": {"app": "a"}}});
        let kube_proxy =
            Some("!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name");
        assert!(matches_labels(&plain, kube_proxy));
        assert!(!matches_labels(&headless, kube_proxy));
        assert!(matches_labels(&plain, Some("app=a,app")));
        assert!(!matches_labels(&plain, Some("app!=a")));
        assert!(matches_labels(&plain, None));
    }
}
