//! Errors that say something about this process, not about the peer.

use std::io;

/// Whether `e` says this process ran out of descriptors or memory (from `socket`, `accept`,
/// `connect`): a local condition, no evidence about the peer. A probe that fails so is not
/// run (`NotRun`), a connect that fails so ejects no backend.
pub fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_exhaustion_counts() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert!(out_of_resources(&io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::ECONNREFUSED, libc::ETIMEDOUT, libc::ECONNRESET] {
            assert!(!out_of_resources(&io::Error::from_raw_os_error(errno)));
        }
        assert!(!out_of_resources(&io::Error::other("no errno")));
    }
}
