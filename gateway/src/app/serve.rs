//! Running a prepared gateway: pingora's server with two background services — the listeners'
//! accept loops and the control plane — and kubegate's shutdown sequence as its shutdown
//! signal.

use crate::app::prepare::Prepared;
use crate::app::shutdown::ShutdownSequence;
use crate::control::Control;
use crate::net::Acceptor;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{RunArgs, Server};
use pingora_core::services::background::background_service;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Runs until the shutdown sequence ends; returns the exit status.
pub fn serve(prepared: Prepared) -> u8 {
    let Prepared {
        gateway,
        listeners,
        control,
        threads,
    } = prepared;
    let conf = ServerConf {
        threads,
        // kubegate's shutdown sequence drains and closes everything itself, then asks pingora
        // for a fast shutdown: pingora's grace period is never used.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(0),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    server.add_service(background_service(
        "listeners",
        Acceptor::new(gateway.clone(), listeners),
    ));
    server.add_service(background_service(
        "control",
        Control::new(gateway.clone(), control),
    ));
    // Exit status of the shutdown sequence; 2 if it never ran to an end.
    let exit_code = Arc::new(AtomicU8::new(2));
    server.run(RunArgs {
        shutdown_signal: Box::new(ShutdownSequence::new(gateway, exit_code.clone())),
    });
    exit_code.load(Ordering::Acquire)
}
