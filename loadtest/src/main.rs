//! `kubegate-loadtest`: what clients see when apiservers restart, crash or hang, behind kubegate
//! and behind the balancers people use today (HAProxy, nginx, Envoy), under the same faults.
#![forbid(unsafe_op_in_unsafe_fn)]

mod client;
mod clusters;
mod control_plane;
mod explain;
mod gateways;
mod herd;
mod kubectl;
mod leader;
mod loopback;
mod plot;
mod record;
mod report;
mod resumes;
mod run;
mod runaway;
mod sampler;
mod scale;
mod scenarios;
mod soak;
mod storm;
mod traffic;
mod verify;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "kubegate-loadtest", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios against gateways and report.
    Run {
        /// Scenarios, comma-separated: rolling-restart, rolling-restart-goaway, crash,
        /// crash-writes, freeze, freeze-leader, flap, slow-start, not-ready, all-down, etcd-down,
        /// blackout, apf-hot, upgrade, calm, or all (calm: no fault, the others' baseline).
        #[arg(long, value_delimiter = ',', default_value = "all")]
        scenario: Vec<String>,
        /// Gateways, comma-separated: kubegate, haproxy-kubeadm, haproxy-tuned, nginx, envoy
        /// (the L4 group, `l4`); kubegate-l7, kubegate-l7-refuse, kubegate-l7-hold, envoy-l7,
        /// haproxy-l7 (`l7`); or all.
        #[arg(long, value_delimiter = ',', default_value = "all")]
        gateways: Vec<String>,
        /// Short faults (CI): freeze 10 s, crash 5 s, two replicas restarted, ...
        #[arg(long)]
        short: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Writes a gateway's configuration (the same the load test runs) and prints its command
    /// line, one argument per line, after a first line with kubegate's admin address (or `-`):
    /// the benchmark runs the peers from here.
    Gateway {
        /// The gateway (see `run --gateways`).
        name: String,
        /// Where it listens.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// A backend address (repeat for more).
        #[arg(long = "backend", required = true)]
        backends: Vec<std::net::SocketAddr>,
        /// A `kubegate-sim certs` directory.
        #[arg(long)]
        pki: PathBuf,
        /// Where its files go.
        #[arg(long)]
        dir: PathBuf,
        /// kubegate's worker threads.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// One kubegate (passthrough and terminate listeners) in front of replicas on etcd under
    /// steady traffic and a random fault every few seconds; checks that nothing acknowledged
    /// is lost, kubegate never restarts, its resources return to baseline, and clients see
    /// failures only inside fault windows. Exits non-zero when a check fails.
    Soak {
        /// How long to inject faults (e.g. 30m, 90s).
        #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Seed of the fault plan (the same seed, the same faults in the same order).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        output: Output,
        /// Write the plot (resources over time, fault windows, failures) as SVG.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Many clients and watches through one gateway while the replicas restart one by one:
    /// the watches that broke, the relists and LISTs the restart cost the replicas, how soon
    /// every watch flowed again, and the gateway's memory and CPU (docs/failover.md, "Scale").
    Scale {
        /// Client connections (HTTP/2, shared by the watches as a kubelet's are).
        #[arg(long, default_value_t = 2000)]
        connections: usize,
        /// Watches in all.
        #[arg(long, default_value_t = 10_000)]
        watches: usize,
        /// Run these watch counts instead (each with watches/5 connections): the cost curve.
        #[arg(long, value_delimiter = ',')]
        sweep: Vec<usize>,
        /// Gateways, comma-separated (see `run --gateways`).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "kubegate,kubegate-l7,haproxy-kubeadm,envoy-l7"
        )]
        gateways: Vec<String>,
        /// Groups the watches are spread over: each write reaches watches/groups of them.
        #[arg(long, default_value_t = 20)]
        groups: usize,
        /// Writes per second (cycling over the groups).
        #[arg(long, default_value_t = 10)]
        writes_per_second: u32,
        /// The share of the watches that are quiet: their objects never change, so they hear
        /// only the replicas' bookmarks (once a minute), as a kubelet's watch of its pods.
        #[arg(long, default_value_t = 1.0 / 3.0)]
        quiet: f64,
        /// The share of the watches of a custom resource, whose watch cache initializes a few
        /// seconds after a restarted replica is ready.
        #[arg(long, default_value_t = 0.1)]
        custom: f64,
        /// How long the run goes on after the last replica is ready again (the share is read
        /// every second meanwhile).
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        settle: Duration,
        /// Restart two replicas, not three (CI).
        #[arg(long)]
        short: bool,
        #[command(flatten)]
        output: Output,
        /// Write the cost curve as SVG.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// A herd: N kube-proxy-like informers of one identity start at once (a DaemonSet rolled
    /// out, a control plane restarted), each LISTing every Service and EndpointSlice, then
    /// watching both through a churn of endpoints: the LISTs, watches and bytes the replicas served, how long the informers
    /// waited and each event's lag, straight to the replicas and through each gateway
    /// (docs/failover.md, "A herd of informers").
    Herd {
        /// Informers, each on its own HTTP/2 connection.
        #[arg(long, default_value_t = 1000)]
        informers: usize,
        /// Services, each with an EndpointSlice, they list (about 1 KiB each; at most 499: a
        /// page of each holds them).
        #[arg(long, default_value_t = 400)]
        objects: usize,
        /// `direct` (no gateway: the informers spread over the replicas), or gateways,
        /// comma-separated (see `run --gateways`; `kubegate-l7-shared` joins identical reads
        /// and shares identical watches).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "direct,haproxy-l7,envoy-l7,kubegate-l7,kubegate-l7-shared"
        )]
        gateways: Vec<String>,
        /// Writes while the informers watch (each a new EndpointSlice: an event at every one).
        #[arg(long, default_value_t = 20)]
        writes: usize,
        /// Informers authenticate as one service account with this many tokens, informer
        /// `i` with token `i % tokens` (every kube-proxy pod has its own bound token); 0:
        /// every informer with the kubeadm layout's node certificate. `kubegate-l7-shared`
        /// shares across senders after a SubjectAccessReview.
        #[arg(long, default_value_t = 0)]
        tokens: usize,
        /// Writes per second.
        #[arg(long, default_value_t = 10)]
        writes_per_second: u32,
        /// Informers start with a watch-list (`sendInitialEvents`, as client-go's since 1.35)
        /// instead of a LIST: each reads its initial events to the bookmark that ends them,
        /// then watches from that position.
        #[arg(long)]
        watch_list: bool,
        #[command(flatten)]
        output: Output,
    },
    /// A DaemonSet-like runaway: one service account on many connections LISTing every
    /// ConfigMap every few seconds, beside kubectl, other users and a leader-elected
    /// controller; calm, storm, then the shed: straight to the replicas, through HAProxy and
    /// Envoy, and through kubegate with `kubegate shed` (two gateways) and with
    /// `terminate.auto_shed` (docs/failover.md, "A runaway, shed").
    Runaway {
        /// ConfigMaps in the cluster, about 1 KiB each: what each LIST reads.
        #[arg(long, default_value_t = 300)]
        objects: usize,
        /// The runaway's connections.
        #[arg(long, default_value_t = 2000)]
        connections: usize,
        /// How often each connection LISTs.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        interval: Duration,
        /// How long each phase lasts.
        #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
        phase: Duration,
        /// direct, haproxy-l7, envoy-l7, kubegate-l7-shed, kubegate-l7-auto (comma-separated).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "direct,haproxy-l7,envoy-l7,kubegate-l7-shed,kubegate-l7-auto"
        )]
        gateways: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
    /// A runaway client: one identity LISTs a large namespace from many connections while
    /// other users run kubectl, through kubegate-l7 without and with a dispatch rule limiting
    /// that identity: the others' latency, and what the storm gets (docs/failover.md,
    /// "Runaway client").
    Storm {
        /// Objects in the namespace the storm LISTs (about 1 KiB each).
        #[arg(long, default_value_t = 1500)]
        objects: usize,
        /// The runaway identity's concurrent LIST loops.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// How long each phase (calm, then storm) lasts.
        #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
        phase: Duration,
        /// Who the runaway is: a kubelet's client certificate, or a service account's bearer
        /// token (which kubegate names with a TokenReview for its `service_accounts` rule).
        #[arg(long, value_enum, default_value = "certificate")]
        runaway: storm::Runaway,
        #[command(flatten)]
        output: Output,
    },
    /// Several clusters behind one kubegate, picked by TLS server name: each scenario run in
    /// cluster a while cluster b (its own etcd, CA and replicas) carries steady traffic, in
    /// each listener mode — what b's clients saw — then kubegate's memory per configured
    /// cluster at rest and busy, and a reload adding one (docs/failover.md, "Several
    /// clusters behind one kubegate"). Exits non-zero when b's clients saw anything.
    Clusters {
        /// Scenarios run in cluster a (see `run --scenario`).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "rolling-restart,crash,freeze"
        )]
        scenario: Vec<String>,
        /// kubegate's listener modes (the scenarios and the memory figure each run in every one).
        #[arg(long, value_delimiter = ',', default_value = "passthrough,terminate")]
        modes: Vec<clusters::Mode>,
        /// Cluster counts of the memory figure, 3 replicas each (the largest plus one are
        /// started); `0` alone: no memory figure.
        #[arg(long, value_delimiter = ',', default_value = "1,10,25,50")]
        sizes: Vec<usize>,
        /// Short faults (CI), as `run --short`, and short memory readings.
        #[arg(long)]
        short: bool,
        #[command(flatten)]
        output: Output,
    },
    /// The README's demo: three replicas, a rolling restart under traffic and real kubectl
    /// (a `get --watch` among them), once through kubegate passing TCP through and once
    /// through kubegate terminating TLS, where the watch survives.
    Demo {
        #[command(flatten)]
        common: Common,
    },
}

/// Where a command keeps its files and writes its report.
#[derive(Args)]
struct Output {
    /// Working directory for configs and logs (default: a new temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct Common {
    /// Apiserver replicas.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    #[command(flatten)]
    output: Output,
    /// Write the timeline plot as SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Do not run real kubectl processes alongside.
    #[arg(long)]
    no_kubectl: bool,
    /// Run against this control plane instead of simulated replicas: a YAML file naming each
    /// replica's address and the commands that carry the faults out (docs/failover.md,
    /// "Against a real control plane").
    #[arg(long, value_name = "FILE")]
    control_plane: Option<PathBuf>,
}

fn expand(list: Vec<String>, all: &[&str]) -> Vec<String> {
    if list.iter().any(|s| s == "all") {
        all.iter().map(|s| s.to_string()).collect()
    } else {
        list
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (scenarios, gateways, pace, common) = match cli.command {
        Command::Run {
            scenario,
            gateways,
            short,
            common,
        } => (
            expand(scenario, scenarios::ALL),
            gateways::expand(&gateways),
            if short {
                scenarios::Pace::SHORT
            } else {
                scenarios::Pace::FULL
            },
            common,
        ),
        Command::Gateway {
            name,
            listen,
            backends,
            pki,
            dir,
            threads,
        } => return print_gateway(&name, listen, &backends, &pki, &dir, threads),
        Command::Soak {
            duration,
            seed,
            output,
            plot,
        } => return run_soak(duration, seed, output, plot),
        Command::Scale {
            connections,
            watches,
            sweep,
            gateways,
            groups,
            writes_per_second,
            quiet,
            custom,
            settle,
            short,
            output,
            plot,
        } => {
            anyhow::ensure!(
                (0.0..=1.0).contains(&quiet)
                    && (0.0..=1.0).contains(&custom)
                    && quiet + custom <= 1.0,
                "--quiet and --custom are shares of the watches: each between 0 and 1, together at most 1"
            );
            let sizes = if sweep.is_empty() {
                vec![(connections, watches)]
            } else {
                sweep.iter().map(|w| ((w / 5).max(1), *w)).collect()
            };
            return run_scale(
                scale::Plan {
                    gateways: gateways::expand(&gateways),
                    sizes,
                    groups: groups.max(1),
                    quiet,
                    custom,
                    settle,
                    writes_per_second,
                    short,
                    dir: PathBuf::new(),
                },
                output,
                plot,
            );
        }
        Command::Herd {
            informers,
            objects,
            gateways,
            writes,
            tokens,
            writes_per_second,
            watch_list,
            output,
        } => {
            return run_herd(
                herd::Plan {
                    informers,
                    objects,
                    gateways,
                    writes,
                    tokens,
                    writes_per_second,
                    watch_list,
                    dir: PathBuf::new(),
                },
                output,
            )
        }
        Command::Runaway {
            objects,
            connections,
            interval,
            phase,
            gateways,
            output,
        } => {
            let mut plan = runaway::Plan {
                objects,
                connections,
                interval,
                phase,
                gateways,
                dir: PathBuf::new(),
            };
            plan.dir = work_dir(output.dir, "runaway")?;
            let rows = until_interrupted(runaway::run(&plan), &plan.dir)?;
            return publish(
                &runaway::markdown(&rows),
                &rows,
                output.json,
                None,
                &plan.dir,
            );
        }
        Command::Storm {
            objects,
            concurrency,
            phase,
            runaway,
            output,
        } => {
            return run_storm(
                storm::Plan {
                    objects,
                    concurrency,
                    phase,
                    runaway,
                    dir: PathBuf::new(),
                },
                output,
            )
        }
        Command::Clusters {
            scenario,
            modes,
            sizes,
            short,
            output,
        } => {
            for s in &scenario {
                anyhow::ensure!(
                    scenarios::ALL.contains(&s.as_str()),
                    "unknown scenario {s}; known: {}",
                    scenarios::ALL.join(", ")
                );
            }
            return run_clusters(
                clusters::Plan {
                    scenarios: scenario,
                    modes,
                    sizes: sizes.into_iter().filter(|n| *n > 0).collect(),
                    windows: if short {
                        clusters::Windows::SHORT
                    } else {
                        clusters::Windows::FULL
                    },
                    pace: if short {
                        scenarios::Pace::SHORT
                    } else {
                        scenarios::Pace::FULL
                    },
                    dir: PathBuf::new(),
                },
                output,
            );
        }
        Command::Demo { common } => (
            vec!["rolling-restart".to_string()],
            vec!["kubegate".to_string(), "kubegate-l7".to_string()],
            scenarios::Pace::FULL,
            common,
        ),
    };
    for s in &scenarios {
        anyhow::ensure!(
            scenarios::ALL.contains(&s.as_str()),
            "unknown scenario {s}; known: {}",
            scenarios::ALL.join(", ")
        );
    }
    for g in &gateways {
        anyhow::ensure!(
            gateways::known(g),
            "unknown gateway {g}; known: {}, {} (groups l4, l7, all)",
            gateways::L4.join(", "),
            gateways::L7.join(", ")
        );
    }
    let dir = work_dir(common.output.dir, "loadtest")?;
    let external = match &common.control_plane {
        Some(file) => Some(control_plane::ExternalSpec::load(file)?),
        None => None,
    };
    let plan = run::Plan {
        scenarios,
        gateways,
        pace,
        replicas: external
            .as_ref()
            .map_or(common.replicas, |e| e.replicas.len()),
        external,
        dir: dir.clone(),
        warmup: Duration::from_secs(3),
        // Long enough to measure the replica share in the 10 s from 3 s after the last fault
        // event.
        cooldown: Duration::from_secs(14),
        kubectl: !common.no_kubectl,
    };
    let reports = until_interrupted(run::run(&plan), &dir)?;
    let plot = common.plot.map(|path| (path, plot::svg(&reports)));
    publish(
        &report::markdown(&reports),
        &reports,
        common.output.json,
        plot,
        &dir,
    )?;
    none_failed(
        reports
            .iter()
            .filter(|r| r.status.starts_with("failed"))
            .map(|r| format!("{} · {}: {}", r.scenario, r.gateway, r.status)),
    )
}

/// An error naming every failed run of `failed`, if any.
fn none_failed(failed: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let failed: Vec<String> = failed.collect();
    anyhow::ensure!(
        failed.is_empty(),
        "{} run(s) failed: {}",
        failed.len(),
        failed.join("; ")
    );
    Ok(())
}

/// The folder a run keeps its files in: `dir`, or a new one named for `what` in the system's
/// temporary folder; made, and absolute (the paths written into the gateways' configuration
/// files are resolved against those files' own folders, not this process's).
fn work_dir(dir: Option<PathBuf>, what: &str) -> anyhow::Result<PathBuf> {
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("kubegate-{what}-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir)?;
    Ok(std::fs::canonicalize(&dir)?)
}

/// Prints a run's table, writes its JSON report and plot where asked, and says where its
/// files are.
fn publish(
    table: &str,
    report: &impl serde::Serialize,
    json: Option<PathBuf>,
    plot: Option<(PathBuf, String)>,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    println!("{table}");
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_vec_pretty(report)?)?;
        eprintln!("report: {}", path.display());
    }
    if let Some((path, svg)) = plot {
        std::fs::write(&path, svg)?;
        eprintln!("plot: {}", path.display());
    }
    eprintln!("configs and logs: {}", dir.display());
    Ok(())
}

/// Runs `work` on a two-thread runtime. Ctrl-C or SIGTERM drops it — every process it started
/// is ended by PID on the way out — and exits 130, naming `dir` where its files are.
fn until_interrupted<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
    dir: &std::path::Path,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        tokio::select! {
            done = work => done.map(Some),
            signal = interrupted() => {
                eprintln!("\n{signal}: stopping the processes this run started");
                Ok(None)
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result? {
        Some(done) => Ok(done),
        None => {
            eprintln!("interrupted; configs and logs: {}", dir.display());
            std::process::exit(130);
        }
    }
}

/// `kubegate-loadtest soak`.
fn run_soak(
    duration: Duration,
    seed: u64,
    output: Output,
    plot: Option<PathBuf>,
) -> anyhow::Result<()> {
    let dir = work_dir(output.dir, "soak")?;
    let plan = soak::SoakPlan {
        duration,
        seed,
        dir: dir.clone(),
    };
    let report = until_interrupted(soak::soak(&plan), &dir)?;
    let plot = plot.map(|path| (path, soak::svg(&report)));
    publish(&soak::markdown(&report), &report, output.json, plot, &dir)?;
    anyhow::ensure!(report.passed(), "the soak found a check that did not hold");
    Ok(())
}

/// `kubegate-loadtest clusters`.
fn run_clusters(mut plan: clusters::Plan, output: Output) -> anyhow::Result<()> {
    plan.dir = work_dir(output.dir, "clusters")?;
    let report = until_interrupted(clusters::run(&plan), &plan.dir)?;
    publish(
        &clusters::markdown(&report),
        &report,
        output.json,
        None,
        &plan.dir,
    )?;
    let failed = report.failures();
    anyhow::ensure!(
        failed.is_empty(),
        "{} check(s) did not hold: {}",
        failed.len(),
        failed.join("; ")
    );
    Ok(())
}

/// `kubegate-loadtest storm`.
fn run_herd(mut plan: herd::Plan, output: Output) -> anyhow::Result<()> {
    for g in &plan.gateways {
        anyhow::ensure!(g == "direct" || gateways::known(g), "unknown gateway {g}");
    }
    anyhow::ensure!(
        (1..=500).contains(&plan.objects),
        "--objects: 1 to 500 (one page)"
    );
    plan.dir = work_dir(output.dir, "herd")?;
    let rows = until_interrupted(herd::run(&plan), &plan.dir)?;
    publish(&herd::markdown(&rows), &rows, output.json, None, &plan.dir)?;
    none_failed(
        rows.iter()
            .filter(|r| r.status == "ok" && (r.listed != r.informers || r.churn.missed > 0))
            .map(|r| {
                format!(
                    "{}: {} of {} informers listed, {} events missed",
                    r.gateway, r.listed, r.informers, r.churn.missed
                )
            }),
    )
}

fn run_storm(mut plan: storm::Plan, output: Output) -> anyhow::Result<()> {
    plan.dir = work_dir(output.dir, "storm")?;
    let rows = until_interrupted(storm::run(&plan), &plan.dir)?;
    publish(&storm::markdown(&rows), &rows, output.json, None, &plan.dir)
}

fn run_scale(mut plan: scale::Plan, output: Output, plot: Option<PathBuf>) -> anyhow::Result<()> {
    for g in &plan.gateways {
        anyhow::ensure!(gateways::known(g), "unknown gateway {g}");
    }
    plan.dir = work_dir(output.dir, "scale")?;
    let runs = until_interrupted(scale::run(&plan), &plan.dir)?;
    let plot = plot.map(|path| (path, scale::svg(&runs)));
    publish(&scale::markdown(&runs), &runs, output.json, plot, &plan.dir)?;
    none_failed(
        runs.iter()
            .filter(|r| r.status != "ok" && !r.status.starts_with("not installed"))
            .map(|r| format!("{} at {} watches: {}", r.gateway, r.watches, r.status)),
    )
}

/// `kubegate-loadtest gateway`: writes the configuration and prints the command line.
fn print_gateway(
    name: &str,
    listen: std::net::SocketAddr,
    backends: &[std::net::SocketAddr],
    pki: &std::path::Path,
    dir: &std::path::Path,
    threads: Option<usize>,
) -> anyhow::Result<()> {
    anyhow::ensure!(gateways::known(name), "unknown gateway {name}");
    std::fs::create_dir_all(dir)?;
    let (pki, dir) = (std::fs::canonicalize(pki)?, std::fs::canonicalize(dir)?);
    let prepared = match gateways::prepare(name, &dir, &pki, backends, listen, threads) {
        Ok(p) => p,
        Err(gateways::Unavailable::NotInstalled(why)) => anyhow::bail!("not installed: {why}"),
        Err(gateways::Unavailable::Failed(e)) => return Err(e),
    };
    let admin = prepared
        .admin
        .map_or_else(|| "-".to_string(), |a| a.to_string());
    println!("{admin}");
    println!("{}", prepared.command.get_program().to_string_lossy());
    for arg in prepared.command.get_args() {
        println!("{}", arg.to_string_lossy());
    }
    Ok(())
}

/// Resolves on the first SIGINT or SIGTERM, with its name.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn run_help_names_every_scenario() {
        let mut cli = Cli::command();
        let run = cli.find_subcommand_mut("run").expect("run");
        let help = run.render_long_help().to_string();
        for s in scenarios::ALL {
            assert!(
                help.contains(&format!(" {s},")),
                "`run --help` misses {s}: {help}"
            );
        }
    }
}
