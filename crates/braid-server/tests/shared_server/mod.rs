//! One started server for all the tests of a test binary that neither stop it nor count on
//! its metrics being theirs alone: starting a server is the slow part of most API tests.
//!
//! `#[tokio::test]` gives every test a runtime of its own, and a server's tasks die with the
//! runtime they were spawned on, so the shared server runs on a runtime that lives as long as
//! the process. The test client keeps no idle connections, so a test's runtime never holds a
//! connection another test would reuse.

use crate::common::{start_with, TestServer};
use braid_server::ServeArgs;
use std::sync::OnceLock;

struct Shared {
    server: TestServer,
    _runtime: tokio::runtime::Runtime,
}

/// The binary's shared server, started with `configure` on first use. A binary passes the same
/// `configure` from every test (through one function of its own), since only the first counts.
pub fn shared_server(configure: fn(&mut ServeArgs)) -> &'static TestServer {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        // Started on a thread of its own: a runtime cannot be entered from a test's runtime.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the shared server's runtime");
            let mut model = None;
            let server = runtime.block_on(start_with(|args| {
                configure(args);
                model = args.model.clone();
            }));
            // The model is in memory now, and the server is never dropped, so its temporary
            // directory would outlive the run: remove it here.
            if let Some(dir) = model.as_deref().and_then(|m| m.parent()) {
                let _ = std::fs::remove_dir_all(dir);
            }
            Shared {
                server,
                _runtime: runtime,
            }
        })
        .join()
        .expect("the shared server started")
    });
    &shared.server
}
