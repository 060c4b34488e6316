//! The server's life: bind, load the model, start the engine, serve, drain, exit.
//!
//! It binds first, so /health answers 503 "loading" while the weights load on a blocking
//! thread. A load failure is logged with its full message (which names the file and the fix)
//! and returned, so the process exits non-zero. On SIGTERM/SIGINT it drains: new requests
//! get 503, running ones finish (up to --drain-timeout-secs), then it returns Ok.
//!
//! braid runs its own accept loop on hyper rather than `axum::serve`, because axum's cannot
//! set hyper's header-read timeout: without one, a client that sends headers one byte at a
//! time holds its connection forever.

use crate::app::router;
use crate::args::{MetricsCompat, ServeArgs};
use crate::connections::{self, Admission, ConnectionLimit};
use crate::kv_events::KvEventPublisher;
use crate::metrics::Metrics;
use crate::request_traces::RequestTraces;
use crate::state::{AppState, Ready};
use crate::validation::Limits;
use crate::write_timeout::WriteTimeout;
use anyhow::Context;
use axum::Router;
use braid_engine::{EngineConfig, SentenceEmbedder};
use braid_model::LoadedModel;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long open connections get to finish their responses once the server stops.
const CONNECTION_GRACE: Duration = Duration::from_secs(5);

/// A started server: listening, loading or serving, until `shutdown()` (or a signal in `serve`).
pub struct Server {
    addr: SocketAddr,
    state: AppState,
    shutdown: watch::Sender<u32>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Starts draining, as SIGTERM does; a second call stops waiting for running requests.
    pub fn shutdown(&self) {
        self.shutdown.send_modify(|n| *n += 1);
    }

    /// Waits until the server has stopped: Ok after a shutdown, Err if the model or engine failed to start.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the server task panicked")?
    }
}

/// Runs the server until SIGTERM or SIGINT, then drains and returns.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let server = start(args).await?;
    let trigger = server.shutdown.clone();
    tokio::spawn(async move {
        loop {
            shutdown_signal().await;
            let n = {
                trigger.send_modify(|n| *n += 1);
                *trigger.borrow()
            };
            if n == 1 {
                tracing::info!("shutdown requested: draining (a second signal stops waiting)");
            }
        }
    });
    server.wait().await
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Binds, then loads the model and starts the engine in the background.
pub async fn start(args: ServeArgs) -> anyhow::Result<Server> {
    args.check()?;
    let chat_template = args.chat_template_source()?;
    let threads = braid_engine::compute_pool::init(args.threads());
    log_kernel(threads);
    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}:{}; is another server using the port? pass --port",
                args.host, args.port
            )
        })?;
    let addr = listener.local_addr()?;
    let metrics = match args.metrics_compat {
        Some(MetricsCompat::Vllm) => Metrics::new().with_vllm_names(),
        None => Metrics::new(),
    };
    let state = AppState::new(&args, Arc::new(metrics));
    if let Some(endpoint) = args.otlp_traces_endpoint.clone() {
        // The exporter's blocking HTTP client is made off the async workers.
        let traces = tokio::task::spawn_blocking(move || RequestTraces::new(&endpoint))
            .await?
            .context("cannot send request traces (--otlp-traces-endpoint)")?;
        let _ = state.traces.set(Arc::new(traces));
    }
    let read_timeout = Duration::from_secs(args.header_read_timeout_secs);
    let app = router(state.clone(), read_timeout);
    let (shutdown, shutdown_rx) = watch::channel(0u32);
    let source = match (
        args.hub_model(),
        args.generation_model(),
        &args.embedding_model,
    ) {
        (Some(m), _, _) => format!("{} from {}@{}", m.file, m.repo, m.revision),
        (None, Some(model), None) => model.display().to_string(),
        (None, Some(model), Some(dir)) => format!("{} and {}", model.display(), dir.display()),
        (None, None, dir) => dir
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display()
            .to_string(),
    };
    tracing::info!("listening on http://{addr}; loading {source}");
    let task = tokio::spawn(run(
        listener,
        app,
        args,
        chat_template,
        state.clone(),
        shutdown_rx,
        read_timeout,
    ));
    Ok(Server {
        addr,
        state,
        shutdown,
        task,
    })
}

/// The one start-up line that says what the server computes with and why: the kernel, how it
/// was chosen, the CPU's vector features and the compute threads.
fn log_kernel(threads: usize) {
    let kernel = braid_kernels::active();
    let how = if braid_kernels::forced_by_env() {
        "forced by BRAID_KERNEL"
    } else {
        "the fastest this CPU supports"
    };
    let features = braid_kernels::cpu_features();
    if features.contains(&"amx-int8") {
        if let Some(why) = braid_kernels::Kernel::Amx.unsupported_reason() {
            tracing::warn!("this CPU has AMX, but the amx kernel {why}");
        }
    }
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(" ")
    };
    tracing::info!(
        "compute kernel {kernel} ({how}); CPU vector features: {features}; {threads} compute threads"
    );
}

async fn run(
    listener: TcpListener,
    app: Router,
    args: ServeArgs,
    chat_template: Option<String>,
    state: AppState,
    shutdown: watch::Receiver<u32>,
    read_timeout: Duration,
) -> anyhow::Result<()> {
    let (stop_accepting, stop_rx) = watch::channel(false);
    let addr = listener.local_addr()?;
    let limit = ConnectionLimit::new(args.max_connections, args.max_connections_per_ip);
    let write_timeout = Duration::from_secs(args.write_timeout_secs);
    let accept = tokio::spawn(accept_loop(
        listener,
        app,
        (read_timeout, write_timeout),
        limit,
        stop_rx,
    ));
    let result = lifecycle(&args, chat_template, &state, shutdown, addr).await;
    let _ = stop_accepting.send(true);
    let _ = accept.await;
    if result.is_ok() {
        tracing::info!("stopped");
    }
    result
}

/// Load, start the engine, serve until told to stop, drain.
async fn lifecycle(
    args: &ServeArgs,
    chat_template: Option<String>,
    state: &AppState,
    mut shutdown: watch::Receiver<u32>,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    let kv_events = match &args.kv_events {
        Some(endpoint) => Some(Arc::new(
            KvEventPublisher::bind(endpoint, &args.kv_events_topic, args.block_size).await?,
        )),
        None => None,
    };
    let started = Instant::now();
    let model = match args.generation_model() {
        Some(path) => {
            let hub = args.hub_model();
            let load = tokio::task::spawn_blocking(move || -> anyhow::Result<LoadedModel> {
                let path = match hub {
                    Some(m) => braid_model::hub::resolve(&m)?,
                    None => path,
                };
                Ok(LoadedModel::load_with_chat_template(
                    &path,
                    chat_template.as_deref(),
                )?)
            });
            tokio::select! {
                loaded = load => match loaded.context("model loading panicked")? {
                    Ok(model) => Some(Arc::new(model)),
                    Err(e) => {
                        tracing::error!("cannot load the model: {e}");
                        return Err(e.context("cannot load the model"));
                    }
                },
                _ = shutdown.changed() => {
                    tracing::info!("shutdown requested while the model was loading");
                    return Ok(());
                }
            }
        }
        None => None,
    };
    if let Some(model) = &model {
        match (&model.chat_template, &args.chat_template) {
            (None, _) => tracing::warn!(
                "the model has no chat template: /v1/chat/completions answers 400 (--chat-template FILE supplies one)"
            ),
            (Some(_), Some(file)) => tracing::info!("chat template from {}", file.display()),
            (Some(_), None) => {}
        }
    }
    let draft_model = match args.draft_model.clone() {
        Some(path) => {
            let load = tokio::task::spawn_blocking(move || LoadedModel::load(&path));
            match load.await.context("draft model loading panicked")? {
                Ok(m) => Some(Arc::new(m)),
                Err(braid_model::ModelError::FileMissing { path }) => {
                    let e = anyhow::anyhow!(
                        "--draft-model {}: no such file; pass a GGUF with the model's vocabulary",
                        path.display()
                    );
                    tracing::error!("{e}");
                    return Err(e);
                }
                Err(e) => {
                    tracing::error!("cannot load the draft model: {e}");
                    return Err(anyhow::Error::new(e).context("cannot load the draft model"));
                }
            }
        }
        None => None,
    };
    let embedder = match args.embedding_model.clone() {
        Some(dir) => {
            let load = tokio::task::spawn_blocking(move || SentenceEmbedder::load(&dir));
            match load.await.context("embedding model loading panicked")? {
                Ok(e) => Some(Arc::new(e)),
                Err(e) => {
                    tracing::error!("cannot load the embedding model: {e}");
                    return Err(anyhow::Error::new(e).context("cannot load the embedding model"));
                }
            }
        }
        None => None,
    };
    // Without a generation model the bounds are the embedding model's: the generation
    // endpoints refuse every request before they are read.
    let (context, vocab_size, described) = match (&model, &embedder) {
        (Some(m), _) => {
            let config = m.config();
            (
                config.context_length,
                m.tokenizer.vocab_size(),
                format!("{}, context {}", config.name, config.context_length),
            )
        }
        (None, Some(e)) => (
            e.max_tokens(),
            e.vocab_size(),
            "embeddings only".to_string(),
        ),
        (None, None) => unreachable!("a server without --model has --embedding-model"),
    };
    let tool_syntax = crate::tools::served_syntax(
        args.tool_call_parser,
        model.as_ref().and_then(|m| m.chat_template.as_ref()),
    )
    .map_err(|e| {
        tracing::error!("{e}");
        anyhow::anyhow!(e)
    })?;
    if model.as_ref().is_some_and(|m| m.chat_template.is_some()) {
        tracing::info!("tool calls are read in the {} syntax", tool_syntax.name());
    }
    let limits = Limits {
        served_model_name: state.served_model_name.clone(),
        embedding_model_name: embedder.as_ref().map(|e| e.id().to_string()),
        context_length: context,
        vocab_size,
        max_tokens_cap: args.max_tokens_cap.unwrap_or(context).min(context),
        max_stop_strings: args.max_stop_strings,
        max_stop_string_len: args.max_stop_string_len,
        max_prompt_tokens: args.max_prompt_tokens.unwrap_or(context).min(context),
        max_request_tokens: args.max_request_tokens,
        special_in_messages: args.special_in_messages,
        reasoning_parser: args.reasoning_parser,
        tool_syntax,
    };
    let engine_config = EngineConfig {
        draft_model,
        ..args.to_engine_config()
    };
    let ready = Ready::start(
        model,
        embedder,
        engine_config,
        state.metrics.clone(),
        limits,
        kv_events,
    )
    .map_err(|e| {
        tracing::error!("cannot start the engine: {e:#}");
        e.context("cannot start the engine")
    })?;
    let engine = ready.engine.clone();
    // Until the engine has calibrated, a request would only wait behind it: /health says
    // "loading" and requests get 503 with Retry-After, as while the model loads.
    engine.until_calibrated().await;
    state.set_ready(ready);
    tracing::info!(
        "ready in {:.1}s: serving `{}` ({described}) on http://{addr}",
        started.elapsed().as_secs_f64(),
        state.served_model_name,
    );

    let _ = shutdown.changed().await;
    engine.start_draining();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.drain_timeout_secs);
    loop {
        let stats = engine.stats();
        if stats.running + stats.waiting == 0 {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(running = stats.running, waiting = stats.waiting, "--drain-timeout-secs passed; stopping with requests unfinished");
                break;
            }
            _ = shutdown.changed() => {
                tracing::warn!(running = stats.running, waiting = stats.waiting, "second shutdown signal; stopping with requests unfinished");
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    Ok(())
}

/// Accepts connections until `stop`, then gives open ones `CONNECTION_GRACE` to finish.
/// Past `--max-connections`, new connections are refused (see `connections`). A connection
/// that cannot write for `write_timeout` is closed (see `write_timeout`).
async fn accept_loop(
    listener: TcpListener,
    app: Router,
    (read_timeout, write_timeout): (Duration, Duration),
    limit: ConnectionLimit,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .keep_alive(true);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => break,
        };
        let place = match limit.admit(peer.ip()) {
            Admission::Serve(place) => place,
            Admission::Refuse(permit, message) => {
                tokio::spawn(connections::refuse(tcp, permit, message));
                continue;
            }
            Admission::Close => continue,
        };
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(WriteTimeout::new(tcp, write_timeout));
        let conn = http.serve_connection(io, TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _place = place;
            if let Err(e) = conn.await {
                tracing::debug!("connection closed: {e}");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(CONNECTION_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("closing connections that did not finish within {CONNECTION_GRACE:?}");
    }
}
