//! A store's errors as the apiserver answers them: `NotFound`, `AlreadyExists`, `Conflict`,
//! `Expired` and a cache behind as the registry's and the watch cache's Status, anything else
//! from the etcd client passed on whole (`responsewriters.ErrorToAPIStatus`).

use crate::resources::Target;
use crate::respond::{self, Reply};
use crate::store::StoreError;
use http::StatusCode;
use serde_json::{json, Value};

/// A store error as the apiserver answers it for `name` of `target`'s resource.
pub(crate) fn store_error(target: &Target<'_>, name: &str, e: StoreError) -> Reply {
    let r = target.resource;
    let what = if r.group.is_empty() {
        r.plural.to_string()
    } else {
        format!("{}.{}", r.plural, r.group)
    };
    match e {
        StoreError::NotFound => respond::not_found(r.group, r.plural, name),
        StoreError::AlreadyExists => respond::status(
            409,
            "AlreadyExists",
            &format!("{what} \"{name}\" already exists"),
            Some(json!({"name": name, "group": r.group, "kind": r.plural})),
        ),
        StoreError::Conflict(_) => respond::status(
            409,
            "Conflict",
            &format!("Operation cannot be fulfilled on {what} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
            Some(json!({"name": name, "group": r.group, "kind": r.plural})),
        ),
        StoreError::Compacted { requested, compacted } => respond::status(
            410,
            "Expired",
            &format!("too old resource version: {requested} ({compacted})"),
            None,
        ),
        // `ErrorNegotiated`: the Status, and `Retry-After` from its `retryAfterSeconds` (1).
        e @ StoreError::TooLarge { .. } => {
            let status = too_large(&e);
            Reply::json(StatusCode::GATEWAY_TIMEOUT, &status).header("retry-after", "1")
        }
        StoreError::Unavailable(why) => {
            tracing::warn!(error = %why, "storage unavailable");
            storage_failed(&why)
        }
    }
}

/// A storage failure as the apiserver writes it: the etcd client's error reaches the handler as
/// it is (`etcd3/store.go`: `Get`, `GetList`, `Create`, ... return it unwrapped;
/// `storage/errors/storage.go`: `InterpretGetError`, `InterpretListError`, ... pass through
/// what is no storage error), and `responsewriters.ErrorToAPIStatus` turns an error that is no
/// `APIStatus` into code 500, no reason (`StatusReasonUnknown`, omitted), and the error's text
/// as the message.
pub(crate) fn storage_failed(why: &str) -> Reply {
    respond::status(500, "", why, None)
}

/// apimachinery's `NewTooLargeResourceVersionError`: a Timeout (504) with the
/// `ResourceVersionTooLarge` cause and a second to wait.
pub fn too_large(e: &StoreError) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": e.to_string(),
        "reason": "Timeout",
        "details": {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    })
}
