//! Label selectors, as far as the simulator reads them: equality-based terms (`a=b`, `c==d`,
//! `e!=f`) and existence (`k`), comma-joined; the LIST handler and the watch filter both ask
//! here.

use serde_json::Value;

/// Equality-based label selectors (`a=b,c==d,e!=f`); anything else matches everything.
/// Whether `obj`'s labels satisfy `selector` (`k=v`, `k==v`, `k!=v`, `k`, comma-joined).
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
        } else {
            labels.get(term.trim()).is_some()
        }
    })
}
