//! Command-line interface: argument parsing and dispatch, and nothing else.
//!
//! This is the only place that picks a device; library code receives it. Files: `args.rs`
//! (the typed arguments), `input.rs` (refusing or warning about input nothing would read),
//! `console.rs` (progress and lines on the terminal).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::Device;

use cumind::checkpoint;
use cumind::config::{is_read_by, Config, DeviceKind, BENCHMARK_READS};
use cumind::metrics::TensorBoardSink;
use cumind::selfplay::evaluate;
use cumind::trainer::{train, RunOptions};

mod args;
mod console;
mod device_choice;
mod input;
mod stop_signal;

pub use args::Cli;
use args::{
    AgentPlays, BenchmarkArgs, CheckEnvArgs, Command, ConfigArgs, Distributed, EvalArgs, PlayArgs,
    PlotArgs, TrainArgs,
};
use console::ConsoleSink;
use cumind::distributed::Collective;
use input::{dedicated_flags, explicit_keys, load_agent, warn_ignored_keys};
use stop_signal::{stop_request, StopRequest};

/// Open `kind` (the only place a device is chosen), as the process's only GPU.
pub fn open_device(kind: DeviceKind) -> Result<Device> {
    open(kind, true)
}

/// Open `kind`; `alone`: no other GPU stream will exist in this process (see
/// [`light_launches`]).
fn open(kind: DeviceKind, alone: bool) -> Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Auto => bail!(
            "device `auto` reached the point of opening a device unresolved (it is resolved from \
             the network and the batch first); please report this"
        ),
        DeviceKind::Cuda(index) => {
            if !candle_core::utils::cuda_is_available() {
                bail!(
                    "device `{kind}` asked for, but this cumind was built without the `cuda` feature: \
                     rebuild with `cargo build --release --features cuda` (see docs/gpu.md)"
                );
            }
            // One real stream per GPU, shared by every thread that uses this device. Candle's
            // `Device::new_cuda` gives each thread its own per-thread default stream, and
            // nothing would order the learner's weight updates (one thread) before an actor's
            // copy of them (another thread); on one stream, work runs in the order the threads
            // enqueued it, and the hand-offs between them (channels, joins) fix that order.
            // NCCL's communicators use the same stream (src/train/nccl.rs).
            // f32 matrix products may use TF32 tensor cores (bf16, the CUDA default, is not
            // affected): `model_dtype = float32` on a GPU trades ~3 decimal digits for speed.
            candle_core::cuda::set_gemm_reduced_precision_f32(true);
            let device = Device::new_cuda_with_stream(index).with_context(|| {
                format!(
                    "cannot open CUDA device {index}: is an NVIDIA GPU with a driver present, and \
                     does the driver support the CUDA version this binary was built with \
                     (docs/gpu.md, \"GPU run-time libraries\")?"
                )
            })?;
            #[cfg(feature = "cuda")]
            light_launches(&device, alone)
                .with_context(|| format!("cannot configure CUDA device {index}"))?;
            #[cfg(not(feature = "cuda"))]
            let _ = alone;
            Ok(device)
        }
    }
}

/// Two driver settings that take host work off every op on a GPU opened with one stream:
///
/// - **No event tracking, for a GPU used alone.** With a stream of its own the context is in
///   cudarc's multi-stream mode, where every buffer records an event at each use so that other
///   streams can wait for it. With one GPU all work runs on its one stream (the reason for that
///   stream, see [`open`]), so the events order nothing and cost a driver call per op. With
///   several GPUs tracking stays on: candle copies a tensor between GPUs on the destination's
///   stream while the source's stream may still be writing it, and the events order that.
/// - **The memory pool keeps what it frees.** Buffers come from the stream-ordered allocator
///   (`cuMemAllocAsync`); with the default release threshold of 0 its pool hands freed memory
///   back to the driver at every synchronisation and asks for it again on the next step.
///   The threshold is raised to "never" for the device's current pool.
#[cfg(feature = "cuda")]
fn light_launches(device: &Device, alone: bool) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let context = device.as_cuda_device()?.cuda_stream().context().clone();
    if alone {
        // SAFETY: cudarc asks the caller to order the streams' uses of each buffer when
        // tracking is off; with one GPU in the process every buffer created from here on is
        // used on this device's single stream only (above).
        unsafe { context.disable_event_tracking() };
    }
    if context.has_async_alloc() {
        context.bind_to_thread()?;
        let mut threshold: u64 = u64::MAX;
        // SAFETY: `cu_device` is the context's own device handle, the pool it returns is valid
        // for it, and the release threshold attribute is a `cuuint64_t` (`threshold`).
        unsafe {
            let pool = result::device::get_mem_pool(context.cu_device())?;
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )?;
        }
    }
    Ok(())
}

/// Set once an error has been printed where it happened (see [`report_before_teardown`]).
static ERROR_PRINTED: AtomicBool = AtomicBool::new(false);

/// Whether the error that `run` returns was printed already.
pub fn error_already_printed() -> bool {
    ERROR_PRINTED.load(Ordering::SeqCst)
}

/// Pass `result` through; on an error with CUDA devices, print it at once and never drop the
/// devices: after a CUDA fault, cudarc's handle destructors (cuBLAS, NCCL) panic, and that
/// panic would be all the user sees. The process exits right after, which frees the GPU.
fn report_before_teardown<T>(result: Result<T>, devices: Vec<Device>) -> Result<T> {
    if let Err(err) = &result {
        if devices.iter().any(Device::is_cuda) {
            eprintln!("error: {err:#}");
            ERROR_PRINTED.store(true, Ordering::SeqCst);
            std::mem::forget(devices);
        }
    }
    result
}

/// `count` devices starting at `first`: on the CPU, `count` CPU replicas; on CUDA,
/// consecutive GPUs from the given index.
pub fn open_devices(first: DeviceKind, count: usize) -> Result<Vec<Device>> {
    match first {
        DeviceKind::Cpu => Ok(vec![Device::Cpu; count.max(1)]),
        DeviceKind::Auto => open(first, true).map(|d| vec![d]),
        DeviceKind::Cuda(first) => {
            let alone = count <= 1;
            (first..first + count.max(1))
                .map(|i| open(DeviceKind::Cuda(i), alone))
                .collect()
        }
    }
}

/// The group of ranks `--distributed` asks for (`None`: this process trains alone).
fn join_ranks(args: &TrainArgs) -> Result<Option<Arc<dyn Collective>>> {
    match args.distributed {
        Distributed::None => Ok(None),
        Distributed::Mpi => join_mpi(args),
    }
}

#[cfg(feature = "mpi")]
fn join_mpi(args: &TrainArgs) -> Result<Option<Arc<dyn Collective>>> {
    if args.distributed_timeout.is_nan() || args.distributed_timeout <= 0.0 {
        bail!(
            "--distributed-timeout must be a positive number of seconds, got {}",
            args.distributed_timeout
        );
    }
    let world = cumind::distributed::mpi::MpiWorld::init(std::time::Duration::from_secs_f64(
        args.distributed_timeout,
    ))
    .context("cannot start MPI")?;
    if world.rank() != 0 || world.size() > 1 {
        // One write, so the ranks' lines do not interleave.
        let line = format!(
            "rank {} of {} on {} (pid {}), local rank {} of {}\n",
            world.rank(),
            world.size(),
            world.host(),
            std::process::id(),
            world.local_rank(),
            world.local_size()
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    // The world is used only from this (the main) thread; the trainer and its learner share it.
    #[allow(clippy::arc_with_non_send_sync)]
    let world: Arc<dyn Collective> = Arc::new(world);
    Ok(Some(world))
}

#[cfg(not(feature = "mpi"))]
fn join_mpi(_args: &TrainArgs) -> Result<Option<Arc<dyn Collective>>> {
    bail!(
        "--distributed mpi needs a build with MPI: `cargo build --release --features mpi` \
         (Open MPI and libclang must be installed; see docs/mpi.md)"
    )
}

/// The first device of this rank: the ranks of one machine (as MPI groups them) take
/// consecutive blocks of `count` GPUs (local rank `l` starts at `cuda:(N + l * count)` for
/// `--device cuda:N`), unless each rank sees only its own GPUs (`CUDA_VISIBLE_DEVICES` set per
/// rank, as `srun --gpus-per-task` does): then every rank starts at `cuda:N` of what it sees.
/// On the CPU, and without ranks, `kind` itself.
fn first_device_of_rank(
    kind: DeviceKind,
    count: usize,
    ranks: Option<&dyn Collective>,
) -> DeviceKind {
    match (kind, ranks) {
        (DeviceKind::Cuda(first), Some(ranks)) => {
            let count = count.max(1);
            let block = first + ranks.local_rank() * count;
            let visible = device_choice::gpu_count();
            if block + count > visible && first + count <= visible {
                // This rank's block does not exist, but one block from `first` does: the
                // launcher gave each rank its own GPUs.
                DeviceKind::Cuda(first)
            } else {
                DeviceKind::Cuda(block)
            }
        }
        (other, _) => other,
    }
}

/// A training run's process settings and devices: the device kind resolved (`auto` by the
/// measured rule) and this rank's devices opened.
fn open_run_devices(
    config: &Config,
    ranks: Option<&dyn Collective>,
) -> Result<(DeviceKind, Vec<Device>)> {
    set_process_options(config, local_ranks(ranks));
    let device_type = device_choice::resolve(
        config.device.device_type,
        config,
        config.environment.num_envs,
        "environments",
    )?;
    let first = first_device_of_rank(device_type, config.device.num_devices, ranks);
    Ok((device_type, open_devices(first, config.device.num_devices)?))
}

/// The ranks of this machine (1 without ranks), for the default thread count.
fn local_ranks(ranks: Option<&dyn Collective>) -> usize {
    ranks.map_or(1, |r| r.local_size().max(1))
}

/// The process-wide settings of `config`: `device.fused_kernels`, and an explicit thread count
/// for rayon and candle, set before any thread starts (with RAYON_NUM_THREADS unset, candle
/// re-derives it on every matmul, see docs/dependencies.md). The cores are shared among the
/// `local_ranks` ranks of this machine. candle's element-wise ops stay on the calling thread
/// (CANDLE_NUM_THREADS=1 unless set): its second pool of spinning threads for them cost more
/// CPU time than it saved beside CuMind's own rayon work (docs/dependencies.md).
fn set_process_options(config: &Config, local_ranks: usize) {
    cumind::network::fused::set_fused_kernels(config.device.fused_kernels);
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
    if let Some(set) = std::env::var_os("RAYON_NUM_THREADS") {
        let wanted = config.other.num_threads;
        if wanted > 0 && set.to_string_lossy() != wanted.to_string() {
            eprintln!(
                "warning: `other.num_threads` = {wanted} has no effect: RAYON_NUM_THREADS={} is set",
                set.to_string_lossy()
            );
        }
        return;
    }
    let n = if config.other.num_threads > 0 {
        config.other.num_threads
    } else {
        // The cores are shared by the ranks on this machine.
        (std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            / local_ranks)
            .max(1)
    };
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    let config_args = cli.config_args();
    match cli.command {
        Command::Config(_) => {
            let config = config_args.load_with(Vec::new())?;
            warn_ignored_keys(&config, &explicit_keys(&config_args)?)?;
            println!("{}", config.to_json());
            Ok(())
        }
        Command::Train(args) => run_train(&config_args, args),
        Command::Eval(args) => run_eval(&config_args, args),
        Command::Play(args) => run_play(&config_args, args),
        Command::Benchmark(args) => run_benchmark(&config_args, args),
        Command::Plot(args) => run_plot(&config_args, args),
        Command::CheckEnv(args) => run_check_env(&config_args, args),
    }
}

fn run_train(config_args: &ConfigArgs, args: TrainArgs) -> Result<()> {
    let extra = dedicated_flags(
        config_args,
        &[
            ("--device", "device.device_type", args.device.clone()),
            (
                "--num-devices",
                "device.num_devices",
                args.num_devices.map(|n| n.to_string()),
            ),
            ("--seed", "other.seed", args.seed.map(|n| n.to_string())),
            ("--env", "environment.env_name", args.env.clone()),
            (
                "--env-kwargs",
                "environment.env_kwargs",
                args.env_kwargs.clone(),
            ),
        ],
    )?;
    let config = match &args.resume {
        None => config_args.load_with(extra)?,
        Some(path) => {
            if !config_args.files.is_empty() {
                bail!("--config cannot be combined with --resume: a resumed run uses its stored configuration (change keys with --set)");
            }
            let (dir, meta) = checkpoint::load_metadata(path)?;
            let mut sets = config_args.sets.clone();
            sets.extend(extra);
            Config::load_resumed(
                &format!("the configuration stored in {}", dir.display()),
                &meta.config.to_string(),
                std::env::vars().collect(),
                sets,
            )
            .context("invalid configuration")?
        }
    };
    let collective = join_ranks(&args)?;
    let rank = collective.as_ref().map_or(0, |c| c.rank());
    if rank == 0 {
        warn_ignored_keys(&config, &explicit_keys(config_args)?)?;
    }
    let (device_type, devices) = open_run_devices(&config, collective.as_deref())?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let first_signal = std::sync::Mutex::new(None);
        // SIGINT (Ctrl-C), SIGTERM (schedulers, containers, systemd) and SIGHUP all stop the
        // run the same way (ctrlc's `termination` feature).
        ctrlc::set_handler(move || {
            let now = Instant::now();
            let mut first = first_signal.lock().unwrap_or_else(|e| e.into_inner());
            match stop_request(*first, now) {
                StopRequest::Stop => {
                    *first = Some(now);
                    stop.store(true, Ordering::SeqCst);
                    eprintln!(
                        "stop signal (SIGINT, SIGTERM or SIGHUP): finishing the current step and \
                         saving a checkpoint (send another to exit at once)"
                    );
                }
                StopRequest::Same => {}
                StopRequest::ExitNow => {
                    eprintln!(
                        "second stop signal: exiting now; the last complete checkpoint stays the \
                         latest"
                    );
                    std::process::exit(130);
                }
            }
        })
        .context("cannot install the signal handler")?;
    }
    if rank > 0 {
        // The other ranks train and exchange gradients; rank 0 writes everything, their
        // replay memories included (sent to it at each checkpoint).
        let options = RunOptions {
            resume: args.resume.clone(),
            stop,
            no_checkpoints: false,
            run_name: Some(format!("rank-{rank}")),
            collective,
        };
        let result = train(&config, &devices, &options, &mut cumind::metrics::NullSink)
            .map_err(anyhow::Error::from);
        report_before_teardown(result, devices)?;
        return Ok(());
    }
    let ranks = collective.as_ref().map_or(1, |c| c.size());
    let options = RunOptions {
        resume: args.resume.clone(),
        stop,
        no_checkpoints: false,
        run_name: None,
        collective,
    };
    train_and_report(
        &config,
        devices,
        options,
        !args.no_progress,
        device_type,
        ranks,
    )?;
    Ok(())
}

/// Train on `config` in this process (rank 0 of one), as `cumind train` does: the device
/// chosen from `device.device_type` (`auto` measured), a progress bar on stderr when
/// `progress`, the summary on stdout and `curves.png` at the end. The run stops after the
/// current step once `stop` is set. Returns the run's checkpoint directory. For programs that
/// embed CuMind (the Python package's `cumind.train`).
pub fn train_config(config: &Config, stop: Arc<AtomicBool>, progress: bool) -> Result<PathBuf> {
    let (device_type, devices) = open_run_devices(config, None)?;
    let options = RunOptions {
        resume: None,
        stop,
        no_checkpoints: false,
        run_name: None,
        collective: None,
    };
    train_and_report(config, devices, options, progress, device_type, 1)
}

/// Rank 0's run: logs, progress, the summary and the curves; returns the run directory.
fn train_and_report(
    config: &Config,
    devices: Vec<Device>,
    mut options: RunOptions,
    progress: bool,
    device_type: DeviceKind,
    ranks: usize,
) -> Result<PathBuf> {
    let run_name_hint = cumind::trainer::planned_run_name(config, options.resume.as_deref())?;
    options.run_name = Some(run_name_hint.clone());
    let log_dir = PathBuf::from(&config.other.log_dir).join(&run_name_hint);
    let tensorboard = TensorBoardSink::new(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    let csv = cumind::metrics::CsvSink::new(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    if csv.torn_bytes() > 0 {
        eprintln!(
            "note: {} ended in an unfinished line ({} bytes, left by a run stopped mid-write); \
             cut it before appending",
            csv.path().display(),
            csv.torn_bytes()
        );
    }
    let mut sink = ConsoleSink::new(tensorboard, csv, progress);
    eprintln!(
        "training {} on {}{} | logs: {} | checkpoints: {}",
        config.environment.env_name,
        device_type,
        if ranks > 1 {
            format!(" x {ranks} MPI ranks")
        } else {
            String::new()
        },
        log_dir.display(),
        PathBuf::from(&config.training.checkpoint_root_dir)
            .join(&run_name_hint)
            .display()
    );
    let result = train(config, &devices, &options, &mut sink).map_err(anyhow::Error::from);
    sink.finish();
    let summary = report_before_teardown(result, devices)?;
    let c = &summary.counters;
    println!(
        "stopped: {} | {} env steps, {} training steps, {} episodes in {:.1}s | recent return {:.1}{}",
        summary.stop_reason,
        c.env_steps,
        c.training_steps,
        c.episodes,
        c.elapsed_seconds,
        summary.recent_return,
        summary
            .last_eval
            .as_ref()
            .map(|e| format!(" | last eval {:.1} +- {:.1}", e.mean_return(), e.std_return()))
            .unwrap_or_default()
    );
    let t = &summary.timing;
    let self_play = if t.actor_threads > 0.0 {
        format!(
            "self-play {:.1}s on actor threads beside the learner (which waited {:.1}s for it)",
            t.actor_threads, t.self_play
        )
    } else {
        format!("self-play {:.1}s", t.self_play)
    };
    println!(
        "time: {self_play}, training {:.1}s, evaluation {:.1}s, checkpoints {:.1}s (last save {:.2}s)",
        t.training, t.evaluation, t.checkpoints, t.last_save
    );
    println!("checkpoint: {}", summary.run_dir.display());
    let best = summary.run_dir.join(cumind::checkpoint::BEST);
    if let (Some(best_return), true) = (c.best_eval_return, best.is_dir()) {
        println!(
            "best checkpoint: {} (evaluation mean return {best_return:.1})",
            best.display()
        );
    }
    // The run's learning curves beside its logs; a failure here costs only the picture.
    let picture = log_dir.join("curves.png");
    let drawn =
        crate::plot::read_run(&log_dir).and_then(|run| crate::plot::draw(&[run], &picture, None));
    match drawn {
        Ok(()) => println!("curves: {}", picture.display()),
        Err(err) => eprintln!("warning: no curves.png: {err}"),
    }
    Ok(summary.run_dir)
}

fn run_eval(config_args: &ConfigArgs, args: EvalArgs) -> Result<()> {
    let mut agent = load_agent("eval", config_args, &args.checkpoint, &Device::Cpu)?;
    set_process_options(agent.config(), 1);
    let kind = device_choice::resolve(args.device, agent.config(), args.episodes, "episodes")?;
    let device = open_device(kind)?;
    if !device.is_cpu() {
        agent = load_agent("eval", config_args, &args.checkpoint, &device)?;
    }
    let config = agent.config();
    if args.episodes == 0 {
        bail!("--episodes must be at least 1");
    }
    if let Some(spec) = &args.opponent {
        return run_match(agent, spec, &args, &device);
    }
    let start = Instant::now();
    let eval = evaluate(
        agent.network(),
        &config.environment.spec(),
        args.episodes,
        agent.search_config(),
        args.seed,
    )?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}: {} episodes, mean return {:.2} +- {:.2} (std), min {:.1}, max {:.1}",
        config.environment.env_name,
        eval.returns.len(),
        eval.mean_return(),
        eval.std_return(),
        eval.returns.iter().cloned().fold(f64::INFINITY, f64::min),
        eval.returns
            .iter()
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max),
    );
    println!(
        "episode lengths: mean {:.1}; {} env steps in {:.2}s ({:.0} steps/s)",
        eval.mean_length(),
        eval.env_steps,
        secs,
        eval.env_steps as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// `eval --opponent`: a match, with a win/draw/loss table per side.
fn run_match(
    mut agent: cumind::Agent,
    spec: &cumind::arena::OpponentSpec,
    args: &EvalArgs,
    device: &Device,
) -> Result<()> {
    use cumind::arena::{play_match, MatchConfig, Opponent, Side};
    if args.games == 0 {
        bail!("--games must be at least 1");
    }
    let sides = match args.agent_plays {
        AgentPlays::First => vec![Side::First],
        AgentPlays::Second => vec![Side::Second],
        AgentPlays::Both => vec![Side::First, Side::Second],
    };
    if *spec == cumind::arena::OpponentSpec::All {
        if args.check_moves {
            bail!("--check-moves is for matches; `--opponent all` checks every move already");
        }
        return run_audit(agent, args, &sides);
    }
    let mut opponent = Opponent::new(spec, device)?;
    let start = Instant::now();
    let records = play_match(
        &mut agent,
        &mut opponent,
        &MatchConfig {
            games: args.games,
            sides,
            random_opening: args.random_opening,
            seed: args.seed,
            check_moves: args.check_moves,
        },
    )?;
    println!(
        "{}: agent ({}) against {spec}, {} games per side in {:.1}s",
        agent.config().environment.env_name,
        args.checkpoint.display(),
        args.games,
        start.elapsed().as_secs_f64()
    );
    let side_name = |side: &Side| match side {
        Side::First => "first",
        Side::Second => "second",
    };
    println!("| agent plays | wins | draws | losses |\n|---|---:|---:|---:|");
    for (side, r) in &records {
        println!(
            "| {} | {} | {} | {} |",
            side_name(side),
            r.wins,
            r.draws,
            r.losses
        );
    }
    if args.check_moves {
        println!(
            "\nthe agent's moves against exact values (positions a solver answers; games by \
             their exact result at the agent's first checked move):"
        );
        println!(
            "| agent plays | moves checked | won positions thrown | drawn positions thrown | \
             games won at first check | drawn | lost | games never checked |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for (side, r) in &records {
            let c = r.moves.unwrap_or_default();
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                side_name(side),
                c.checked,
                c.threw_win,
                c.threw_draw,
                c.first_won,
                c.first_drawn,
                c.first_lost,
                c.never_checked
            );
        }
    }
    Ok(())
}

/// `eval --opponent all`: the agent against every opponent line, checked with exact values.
fn run_audit(
    mut agent: cumind::Agent,
    args: &EvalArgs,
    sides: &[cumind::arena::Side],
) -> Result<()> {
    use cumind::arena::{audit::audit_side, Side};
    let name = agent.config().environment.env_name.clone();
    let mut env = agent.config().environment.spec().make()?;
    if env.num_players() < 2 {
        bail!("`--opponent all` is for two-player games; {name} has one player");
    }
    let result = |v: f32| match v {
        v if v > 0.0 => "win",
        v if v < 0.0 => "loss",
        _ => "draw",
    };
    let start = Instant::now();
    let mut audits = Vec::new();
    for &side in sides {
        let player = if side == Side::First { 0 } else { 1 };
        audits.push((side, audit_side(&mut agent, env.as_mut(), player)?));
    }
    println!(
        "{name}: agent ({}) against every opponent (all replies tried), in {:.1}s",
        args.checkpoint.display(),
        start.elapsed().as_secs_f64()
    );
    println!(
        "| agent plays | positions | mistakes | worst result | perfect play gets | games won | drawn | lost |\n|---|---:|---:|---|---|---:|---:|---:|"
    );
    for (side, audit) in &audits {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            if *side == Side::First {
                "first"
            } else {
                "second"
            },
            audit.positions,
            audit.mistakes.len(),
            result(audit.worst_result),
            result(audit.exact_value),
            audit.lines.wins,
            audit.lines.draws,
            audit.lines.losses
        );
    }
    for (side, audit) in &audits {
        for mistake in &audit.mistakes {
            println!(
                "\nmistake ({} player) after moves {:?}: agent plays {} ({}), best {:?} ({})\n{}",
                if *side == Side::First {
                    "first"
                } else {
                    "second"
                },
                mistake.line,
                mistake.action,
                result(mistake.value),
                mistake.best_actions,
                result(mistake.best_value),
                mistake.board.trim_end()
            );
        }
    }
    Ok(())
}

fn run_play(config_args: &ConfigArgs, args: PlayArgs) -> Result<()> {
    use std::io::{BufRead, Write};
    let mut agent = load_agent("play", config_args, &args.checkpoint, &Device::Cpu)?;
    let name = agent.config().environment.env_name.clone();
    let mut env = agent.config().environment.spec().make()?;
    if env.num_players() < 2 {
        bail!("`play` is for two-player games; {name} has one player (use `cumind eval`)");
    }
    let human = if args.second { 1 } else { 0 };
    let (mut observation, _) = env.reset(Some(0));
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    println!(
        "{name}: you are player {human} ({})",
        if human == 0 { "first" } else { "second" }
    );
    loop {
        println!("{}", env.render());
        let mover = env.to_play();
        let action = if mover == human {
            print!("your move {:?}: ", env.legal_actions());
            std::io::stdout().flush()?;
            let Some(line) = lines.next() else {
                println!("\nno more input: game abandoned");
                return Ok(());
            };
            match line?.trim().parse::<usize>() {
                Ok(a) => a,
                Err(_) => {
                    println!("not a number: enter one of {:?}", env.legal_actions());
                    continue;
                }
            }
        } else {
            let a = agent.select_actions_in_games(&[env.as_ref()], &[&observation], false)?[0];
            let value = agent
                .last_root_values()
                .first()
                .copied()
                .unwrap_or(f32::NAN);
            println!("agent plays {a} (its search values the position at {value:+.2} for itself)");
            a
        };
        match env.step(action) {
            Ok(step) => {
                observation = step.observation;
                if step.terminated || step.truncated {
                    println!("{}", env.render());
                    let result = match step.info.get("winner").copied() {
                        Some(w) if w as usize == human && w >= 0.0 => "you win",
                        Some(w) if w >= 0.0 => "the agent wins",
                        _ => "draw",
                    };
                    println!("game over: {result}");
                    return Ok(());
                }
            }
            // Illegal human input: say why and ask again (the game is unchanged).
            Err(err) if mover == human => println!("{err}"),
            Err(err) => return Err(err.into()),
        }
    }
}

fn run_benchmark(config_args: &ConfigArgs, args: BenchmarkArgs) -> Result<()> {
    let extra = dedicated_flags(
        config_args,
        &[("--device", "device.device_type", args.device.clone())],
    )?;
    let config = config_args.load_with(extra)?;
    let explicit = explicit_keys(config_args)?;
    for key in &explicit {
        if !is_read_by(key, BENCHMARK_READS) {
            let hint = match key.as_str() {
                "device.num_devices" => " (use benchmark --num-devices)",
                "data_types.model_dtype" => " (use benchmark --dtypes)",
                "environment.num_envs" => " (use benchmark --batch-sizes)",
                _ => "",
            };
            eprintln!("warning: `{key}` has no effect on `benchmark`{hint}");
        }
    }
    warn_ignored_keys(&config, &explicit)?;
    set_process_options(&config, 1);
    let largest = args.batch_sizes.iter().copied().max().unwrap_or(1);
    let kind = device_choice::resolve(config.device.device_type, &config, largest, "batch")?;
    let devices = open_devices(kind, args.num_devices)?;
    let dtypes = args
        .dtypes
        .iter()
        .map(|d| cumind::benchmark::parse_dtype(d).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if args.batch_sizes.is_empty() || args.batch_sizes.contains(&0) {
        bail!("--batch-sizes must list sizes of at least 1");
    }
    let plan = cumind::benchmark::BenchmarkPlan {
        dtypes,
        batch_sizes: args.batch_sizes.clone(),
        repetitions: args.repetitions.max(1),
        warmup: args.warmup,
        training: !args.no_training,
        devices: devices.clone(),
    };
    let measured = cumind::benchmark::measure(&config, &plan).map_err(anyhow::Error::from);
    drop(plan);
    let report = report_before_teardown(measured, devices)?;
    println!("{}", report.table());
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&args.out, json)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("results written to {}", args.out.display());
    Ok(())
}

fn run_plot(config_args: &ConfigArgs, args: PlotArgs) -> Result<()> {
    if !config_args.files.is_empty() || !config_args.sets.is_empty() {
        bail!("`plot` reads only the runs' metrics.csv files; --config and --set would have no effect");
    }
    let mut runs = args
        .runs
        .iter()
        .map(|path| crate::plot::read_curves(path))
        .collect::<Result<Vec<_>, _>>()?;
    crate::plot::relabel(&mut runs, &args.labels)?;
    crate::plot::draw(&runs, &args.out, args.font.as_deref())?;
    println!("{} runs drawn into {}", runs.len(), args.out.display());
    Ok(())
}

fn run_check_env(config_args: &ConfigArgs, args: CheckEnvArgs) -> Result<()> {
    if !config_args.files.is_empty() || !config_args.sets.is_empty() {
        bail!(
            "`check-env` takes environments by name (default: every built-in one) and reads no \
             configuration; --config and --set would have no effect"
        );
    }
    if args.episodes == 0 {
        bail!("--episodes 0 would check nothing: give at least 1");
    }
    let names: Vec<String> = if args.names.is_empty() {
        cumind_envs::names().iter().map(|n| n.to_string()).collect()
    } else {
        args.names.clone()
    };
    // Every name is known before any environment is played.
    let mut envs = names
        .iter()
        .map(|name| cumind_envs::make(name))
        .collect::<Result<Vec<_>, _>>()?;
    let options = cumind_envs::CheckOptions {
        episodes: args.episodes,
        seed: args.seed,
        ..Default::default()
    };
    let mut failed = Vec::new();
    for (name, env) in names.iter().zip(&mut envs) {
        let report = cumind_envs::check_env_with(env.as_mut(), &options);
        println!("{name}: {report}");
        if !report.passed() {
            failed.push(name.as_str());
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} environment(s) broke the contract: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}
