//! The `replaygate` binary: parses the command line and runs `serve`, `check`, `config check`,
//! `keys new`, `profile show` or `profile check`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use replaygate::admin::{AdminState, AdminThread};
use replaygate::cli::{Cli, Command, ConfigCommand, KeysCommand, ProfileCommand, ServeArgs};
use replaygate::config::Config;
use replaygate::proxy::state::Reloader;
use replaygate::proxy::{self, ProxyState, ServerSettings};
use replaygate::reload::ConfigReload;
use replaygate::state::StateStore;

/// jemalloc instead of the system allocator: a proxied request makes some eighty allocations
/// (bodies, buffers, headers), and jemalloc's per-thread caches serve them with about 4% less
/// CPU per 16 KiB request than glibc, at the same peak RSS (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => {
            let code = replaygate::check::run(
                &args,
                std::io::stdin().lock(),
                &mut std::io::stdout().lock(),
                &mut std::io::stderr(),
            );
            ExitCode::from(code)
        }
        Command::Config(ConfigCommand::Check(args)) => ExitCode::from(replaygate::commands::config_check(
            &args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr(),
        )),
        Command::Keys(KeysCommand::New(args)) => ExitCode::from(replaygate::commands::keys_new(
            &args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr(),
        )),
        Command::Profile(ProfileCommand::Show(args)) => ExitCode::from(replaygate::commands::profile_show(
            &args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr(),
        )),
        Command::Profile(ProfileCommand::Check(args)) => ExitCode::from(replaygate::commands::profile_check(
            &args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr(),
        )),
        Command::Serve(args) => match serve(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("replaygate serve: {message}");
                ExitCode::from(2)
            }
        },
    }
}

/// Where the configuration comes from: `--config`/`$REPLAYGATE_CONFIG`, else `./proxy.toml`,
/// else the default built into the binary.
/// Returns the configuration and the file it came from (`None` for the built-in default).
fn load_config(explicit: Option<&Path>) -> Result<(Config, Option<PathBuf>), String> {
    let path = match explicit {
        Some(path) => Some(path.to_owned()),
        None => Some(PathBuf::from("proxy.toml")).filter(|p| p.exists()),
    };
    match path {
        Some(path) => Ok((Config::load(&path).map_err(|e| e.to_string())?, Some(path))),
        None => Ok((Config::embedded_default().map_err(|e| e.to_string())?, None)),
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let (mut config, path) = load_config(args.config.as_deref())?;
    let source = path.as_ref().map_or_else(
        || "built-in default".to_owned(),
        |path| path.display().to_string(),
    );
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    if config.admin.collides_with(config.server.listen) {
        return Err(format!(
            "the admin listener ({}) may not take the proxy's port ({})",
            config
                .admin
                .listen
                .map_or_else(String::new, |admin| admin.to_string()),
            config.server.listen
        ));
    }
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .map_err(|_| "a TLS crypto provider was already installed".to_owned())?;
    // Declared before the runtime, so it is dropped after it: the last spans are exported and
    // the last lines written.
    let _telemetry = replaygate::telemetry::init(&config.log, &config.telemetry)?;
    let workers = config.server.worker_threads();
    let env = |name: &str| std::env::var(name).ok();
    let states = ProxyState::for_workers(&config, &env, workers).map_err(|e| e.to_string())?;
    for (provider, missing) in states[0].unconfigured() {
        tracing::warn!(
            provider,
            missing,
            "provider unconfigured: its requests get 503 provider_unconfigured"
        );
    }
    let runtime = proxy::worker_runtime().map_err(|e| format!("cannot start the runtime: {e}"))?;
    let listener = runtime
        .block_on(async {
            tokio::net::TcpListener::bind(config.server.listen)
                .await?
                .into_std()
        })
        .map_err(|e| format!("cannot listen on {}: {e}", config.server.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%address, config = %source, providers = config.providers.len(), workers, tls = config.server.tls.is_some(), "replaygate listening");
    runtime.block_on(report_state(&states[0].store));
    runtime.block_on(replaygate::state::report_memory_policy(
        &states[0].store,
        states[0].metrics.state(),
    ));
    if let Some(endpoint) = &config.telemetry.otlp_endpoint {
        tracing::info!(%endpoint, service = %config.telemetry.service_name, "exporting request spans");
    }
    let reload = ConfigReload::new(path, Reloader::join(&states), config.clone());
    start_reloads(reload, config.server.watch_config)
        .map_err(|e| format!("cannot start the reload thread: {e}"))?;
    let admin = match config.admin.listen {
        Some(address) => {
            let state = AdminState::of(&states[0]);
            let thread = AdminThread::start(address, state.clone())
                .map_err(|e| format!("cannot start the admin listener on {address}: {e}"))?;
            tracing::info!(address = %thread.address(), "admin listening (GET /metrics, /healthz, /readyz)");
            Some((thread, state))
        }
        None => None,
    };
    let settings = ServerSettings {
        header_read_timeout: config.server.header_read_timeout,
        shutdown_grace: config.server.shutdown_grace,
    };
    let draining = admin.as_ref().map(|(_, state)| state.clone());
    let shutdown = async move {
        shutdown_signal().await;
        if let Some(admin) = draining {
            admin.drain();
        }
    };
    let served = proxy::run_workers(&runtime, listener, states, settings, shutdown)
        .map_err(|e| format!("cannot start the workers: {e}"));
    if let Some((thread, _)) = admin {
        thread.stop();
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// Logs whether the state backend answers at start, so a Redis that refuses the TLS handshake
/// or the login is named before a request needs it. The proxy serves either way (the ping is
/// bounded by `[state] timeout`).
async fn report_state(store: &StateStore) {
    let backend = store.backend();
    match store.ping().await {
        Ok(()) => tracing::info!(backend, "state backend answers"),
        Err(error) => tracing::warn!(
            backend,
            %error,
            "state backend does not answer: /readyz answers 503 until it does (unless [ledger] on_unavailable = \"allow\")"
        ),
    }
}

/// Serves reloads (SIGHUP, file changes) on a thread of their own until the process ends. The
/// SIGHUP handler is installed before this returns, so a SIGHUP never meets the default action
/// (exit).
fn start_reloads(reload: ConfigReload, watch: bool) -> std::io::Result<()> {
    let runtime = proxy::worker_runtime()?;
    let hangups = runtime.block_on(async { replaygate::reload::hangups() });
    std::thread::Builder::new()
        .name("replaygate-reload".into())
        .spawn(move || runtime.block_on(reload.run(watch, hangups)))?;
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
