//! Tensor ops, device-to-host reads and heap allocations per search simulation and per
//! training step, counted on the CPU (the same code issues the same ops on CUDA, where each op
//! is a kernel launch and each read a blocking synchronisation). See `cumind::op_count`.
//! Three tables: candle's elementary ops only (the fast paths off), the tensor path with the
//! fused kernels (what a GPU runs: `network::fused` has CUDA kernels), and the CPU's own path,
//! where an MLP network searches and trains on host buffers with almost no tensor op.
//!
//! ```sh
//! cargo run --release --example op_counts                      # the defaults (CartPole)
//! cargo run --release --example op_counts -- agents/connect4.json
//! cargo run --release --example op_counts -- FILE   # FILE: {"Data Types": {"model_dtype": "bfloat16"}}
//! ```
//!
//! Single-threaded on purpose: the counters are process-wide.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::Device;
use rand::{Rng, SeedableRng};

use cumind::components::{self, EnvInfo};
use cumind::network::{MuZeroNetwork, SearchModel};
use cumind::op_count::OpCount;
use cumind::replay::{GameHistory, ReplayBuffer};
use cumind::search::{SearchInput, Searcher};
use cumind::train::Learner;
use cumind::{Config, ConfigSources};

/// The system allocator, counting calls to `alloc`/`realloc`.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// (tensor ops, host reads, allocations) per unit of `f`, over `units` units.
fn per_unit(units: u64, f: impl FnOnce()) -> (f64, f64, f64) {
    let a0 = allocations();
    let mark = OpCount::start();
    f();
    let count = OpCount::since(mark);
    let allocs = allocations() - a0;
    let u = units as f64;
    (
        count.tensor_ops as f64 / u,
        count.host_reads as f64 / u,
        allocs as f64 / u,
    )
}

fn main() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let files: Vec<std::path::PathBuf> = std::env::args().skip(1).map(Into::into).collect();
    let config = Config::load(&ConfigSources {
        files,
        ..ConfigSources::default()
    })
    .expect("configuration");
    let env = EnvInfo::of(&config).expect("environment");
    let spec = components::network_spec(&config, &env);
    // f32 unless the configuration names another compute dtype ("auto" is f32 on the CPU;
    // a file holding {"Data Types": {"model_dtype": "bfloat16"}} counts CUDA's default).
    let dtype = cumind::network::compute_dtype(config.data_types.model_dtype, &Device::Cpu);
    let network = MuZeroNetwork::new(spec.clone(), 0, &Device::Cpu, dtype).unwrap();
    let search = components::search_config(&config, &env);
    let sims = search.num_simulations as u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    println!(
        "{} network (hidden {}, latent {}, blocks {}, {dtype:?} compute), {} simulations, batch {} for training",
        config.environment.env_name,
        spec.hidden_dim,
        spec.latent_dim,
        spec.num_blocks,
        sims,
        config.training.batch_size
    );
    for (fused, host, path) in [
        (
            false,
            false,
            "written-out ops: what CUDA ran before it had kernels of its own",
        ),
        (
            true,
            false,
            "tensor path with the fused kernels: the ops CUDA runs (`cuda` feature)",
        ),
        (
            true,
            true,
            "CPU path: host MLP inference and training (hand-written backward), in-place AdamW",
        ),
    ] {
        cumind::network::fused::set_fused_kernels(fused);
        cumind::network::fused::set_host_paths(host);
        println!("\n{path}\n");
        measure(&config, &env, &network, &search, &mut rng);
    }
    let params = network.params().named().count();
    println!("\n{params} parameter tensors");
}

/// Print the counts per search simulation (batch 1 and 64) and per training step.
fn measure(
    config: &Config,
    env: &EnvInfo,
    network: &MuZeroNetwork,
    search: &cumind::search::SearchConfig,
    rng: &mut rand::rngs::StdRng,
) {
    let spec = network.spec();
    let obs_len = spec.obs_len();
    let a = spec.num_actions;
    let sims = search.num_simulations as u64;
    println!("| measured | tensor ops | host reads | heap allocations |");
    println!("|---|---:|---:|---:|");
    for batch in [1usize, 64] {
        let observations: Vec<f32> = (0..batch * obs_len)
            .map(|_| rng.random_range(-0.1..0.1))
            .collect();
        let masks = vec![true; batch * a];
        let mut searcher = Searcher::new();
        let mut run = |rng: &mut rand::rngs::StdRng| {
            let mut model = SearchModel::new(network);
            searcher
                .run(
                    &mut model,
                    search,
                    &SearchInput {
                        observations: &observations,
                        batch,
                        legal_masks: &masks,
                        add_noise: true,
                    },
                    rng,
                )
                .unwrap();
        };
        run(rng); // warm-up: buffers sized once
        let (ops, reads, allocs) = per_unit(sims, || run(rng));
        println!(
            "| per search simulation, batch {batch} (initial inference included, /{sims}) | {ops:.1} | {reads:.2} | {allocs:.1} |"
        );
    }

    let mut replay = ReplayBuffer::new(components::replay_config(config, env));
    for _ in 0..20 {
        let first: Vec<f32> = (0..obs_len).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut game = GameHistory::new(obs_len, a, &first, 0);
        for _ in 0..500 {
            let next: Vec<f32> = (0..obs_len).map(|_| rng.random_range(-1.0..1.0)).collect();
            game.push(
                rng.random_range(0..a),
                1.0,
                rng.random_range(0.0..5.0),
                &vec![1.0 / a as f32; a],
                &next,
                0,
            );
        }
        game.finish(true, 0.0);
        replay.save_game(game).unwrap();
    }
    let learner_config = components::learner_config(config, 1000);
    let mut learner =
        Learner::new(network.deep_copy(&Device::Cpu).unwrap(), learner_config).unwrap();
    let batches: Vec<_> = (0..12)
        .map(|_| replay.sample(config.training.batch_size, rng).unwrap())
        .collect();
    for b in &batches[..2] {
        learner.train_step(b).unwrap();
    }
    let (ops, reads, allocs) = per_unit(10, || {
        for b in &batches[2..] {
            learner.train_step(b).unwrap();
        }
    });
    println!(
        "| per training step (K = {}, sampling excluded) | {ops:.1} | {reads:.2} | {allocs:.1} |",
        config.self_play.num_unroll_steps
    );
}
