//! The op and host-read counters, and what they pin down: one device-to-host read per search
//! simulation and two per training step. The counters are process-wide, so every test here
//! takes `LOCK` and the other test binaries (separate processes) cannot disturb them.

use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;

use cumind::network::{MuZeroNetwork, SearchModel};
use cumind::op_count::{read_f32, OpCount};
use cumind::replay::ReplayBuffer;
use cumind::search::{SearchConfig, SearchInput, SearchPolicy, Searcher};
use cumind::testing::games::{replay_config, RandomGame};
use cumind::testing::specs::tiny_spec;
use cumind::train::Learner;
use cumind::Config;

static LOCK: Mutex<()> = Mutex::new(());

#[test]
fn the_counters_count_what_happens_in_between() {
    let _guard = LOCK.lock().unwrap();
    let a = Tensor::ones((2, 3), DType::F32, &Device::Cpu).unwrap();
    let mark = OpCount::start();
    let b = (&a + &a).unwrap();
    let c = b.exp().unwrap();
    let d = c.sum_all().unwrap();
    let values = read_f32(&d).unwrap();
    let count = OpCount::since(mark);
    assert_eq!(count.host_reads, 1);
    // add, exp, sum_all (a sum and a reshape in candle), and the read's flatten (a view,
    // still a tensor).
    assert_eq!(count.tensor_ops, 5, "{count:?}");
    assert!((values[0] - 6.0 * 2f32.exp()).abs() < 1e-4);
    assert_eq!(OpCount::since(OpCount::start()), OpCount::default());
}

#[test]
fn the_fused_kernels_are_one_op_each_on_f32_cpu_tensors() {
    use cumind::network::fused::{add_bias, layer_norm, soft_cross_entropy};
    let _guard = LOCK.lock().unwrap();
    let x = Tensor::arange(0f32, 24.0, &Device::Cpu)
        .unwrap()
        .reshape((4, 6))
        .unwrap();
    let gamma = Tensor::ones(6, DType::F32, &Device::Cpu).unwrap();
    let beta = Tensor::zeros(6, DType::F32, &Device::Cpu).unwrap();
    let targets = Tensor::full(1.0f32 / 6.0, (4, 6), &Device::Cpu).unwrap();
    let ops = |f: &dyn Fn() -> Tensor| {
        let mark = OpCount::start();
        f();
        OpCount::since(mark).tensor_ops
    };
    assert_eq!(ops(&|| layer_norm(&x, &gamma, &beta, 1e-5).unwrap()), 1);
    assert_eq!(ops(&|| add_bias(&x, &gamma).unwrap()), 1);
    assert_eq!(ops(&|| soft_cross_entropy(&x, &targets).unwrap()), 1);
    // bf16: the bias add is one op too; the layer norm goes through the f32 kernel between
    // two casts.
    let half = x.to_dtype(DType::BF16).unwrap();
    assert_eq!(ops(&|| layer_norm(&half, &gamma, &beta, 1e-5).unwrap()), 3);
    let half_bias = gamma.to_dtype(DType::BF16).unwrap();
    assert_eq!(ops(&|| add_bias(&half, &half_bias).unwrap()), 1);
    // f16 takes the written-out ops (a broadcast and an add).
    let f16 = x.to_dtype(DType::F16).unwrap();
    let f16_bias = gamma.to_dtype(DType::F16).unwrap();
    assert!(ops(&|| add_bias(&f16, &f16_bias).unwrap()) > 1);
}

fn search_config(policy: SearchPolicy, simulations: usize) -> SearchConfig {
    SearchConfig {
        num_simulations: simulations,
        discount: 0.99,
        c1: 1.25,
        c2: 19652.0,
        dirichlet_alpha: 0.3,
        exploration_fraction: 0.25,
        two_player: false,
        policy,
        symmetries: Vec::new(),
        exact_rules: false,
        sampling_moves: None,
        value_bounds: None,
        unvisited_value: Default::default(),
        decisive_moves: false,
        solver: false,
        helper_threads: 0,
        bf16_inference: false,
    }
}

#[test]
fn a_search_reads_from_the_device_once_per_simulation() {
    let _guard = LOCK.lock().unwrap();
    for shape in [vec![4], vec![2, 3, 3]] {
        let spec = tiny_spec(shape.clone(), 3);
        let net = MuZeroNetwork::new(spec, 1, &Device::Cpu, DType::F32).unwrap();
        let per: usize = shape.iter().product();
        let batch = 5;
        let observations: Vec<f32> = (0..batch * per).map(|i| (i as f32 * 0.1).sin()).collect();
        let masks = vec![true; batch * 3];
        let mut searcher = Searcher::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for simulations in [8, 20] {
            // The tensor path (what a GPU runs); on the CPU an MLP searches on the host.
            let mut model = SearchModel::on_tensors(&net);
            let mark = OpCount::start();
            searcher
                .run(
                    &mut model,
                    &search_config(SearchPolicy::Puct, simulations),
                    &SearchInput {
                        observations: &observations,
                        batch,
                        legal_masks: &masks,
                        add_noise: false,
                    },
                    &mut rng,
                )
                .unwrap();
            let count = OpCount::since(mark);
            // The initial inference and one call per simulation: one read each.
            assert_eq!(
                count.host_reads,
                simulations as u64 + 1,
                "shape {shape:?}, {simulations} simulations: {count:?}"
            );
        }
    }
}

#[test]
fn a_host_search_creates_no_tensor_and_reads_nothing() {
    let _guard = LOCK.lock().unwrap();
    let net = MuZeroNetwork::new(tiny_spec(vec![4], 3), 1, &Device::Cpu, DType::F32).unwrap();
    let observations: Vec<f32> = (0..5 * 4).map(|i| (i as f32 * 0.1).sin()).collect();
    let mut model = SearchModel::new(&net);
    let mark = OpCount::start();
    Searcher::new()
        .run(
            &mut model,
            &search_config(SearchPolicy::Puct, 16),
            &SearchInput {
                observations: &observations,
                batch: 5,
                legal_masks: &[true; 15],
                add_noise: true,
            },
            &mut rand::rngs::StdRng::seed_from_u64(4),
        )
        .unwrap();
    assert_eq!(OpCount::since(mark), OpCount::default());
}

#[test]
fn a_training_step_reads_from_the_device_at_most_twice() {
    let _guard = LOCK.lock().unwrap();
    let mut replay = ReplayBuffer::new(replay_config(10_000, 5, 10, 0.997));
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let game = RandomGame {
        obs_len: 4,
        num_actions: 2,
        len: 30,
        rewards: 0.0..1.0,
        root_values: 0.0..5.0,
        terminated: false,
        final_value: 3.0,
    };
    for _ in 0..6 {
        replay.save_game(game.draw(&mut rng)).unwrap();
    }
    let config = Config::default_config();
    let net = MuZeroNetwork::new(tiny_spec(vec![4], 2), 2, &Device::Cpu, DType::F32).unwrap();
    let mut learner = Learner::new(net, cumind::components::learner_config(&config, 100)).unwrap();
    for step in 0..4 {
        let batch = replay.sample(16, &mut rng).unwrap();
        let mark = OpCount::start();
        let stats = learner.train_step(&batch).unwrap();
        let count = OpCount::since(mark);
        // The target network's bootstrap values, then the loss, norm and priorities together.
        assert!(count.host_reads <= 2, "step {step}: {count:?}");
        assert!(stats.total_loss.is_finite() && stats.grad_norm > 0.0);
        assert_eq!(stats.priorities.len(), 16);
    }
}

/// Four training steps of a fresh learner on fixed batches, with the fused kernels and the
/// CPU's host paths as given: the losses and the final weights.
fn train_four_steps(fused: bool, host: bool) -> (Vec<f32>, Vec<f32>, u64) {
    use cumind::network::fused::{set_fused_kernels, set_host_paths};
    let mut replay = ReplayBuffer::new(replay_config(10_000, 5, 10, 0.997));
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let game = RandomGame {
        obs_len: 4,
        num_actions: 2,
        len: 40,
        rewards: 0.0..1.0,
        root_values: 0.0..5.0,
        terminated: true,
        final_value: 0.0,
    };
    for _ in 0..6 {
        replay.save_game(game.draw(&mut rng)).unwrap();
    }
    let batches: Vec<_> = (0..4)
        .map(|_| replay.sample(16, &mut rng).unwrap())
        .collect();
    let config = Config::default_config();
    set_fused_kernels(fused);
    set_host_paths(host);
    let net = MuZeroNetwork::new(tiny_spec(vec![4], 2), 3, &Device::Cpu, DType::F32).unwrap();
    let mut learner = Learner::new(net, cumind::components::learner_config(&config, 100)).unwrap();
    let mark = OpCount::start();
    let losses: Vec<f32> = batches
        .iter()
        .map(|b| learner.train_step(b).unwrap().total_loss)
        .collect();
    let ops = OpCount::since(mark).tensor_ops;
    let weights = cumind::testing::learner::weights(learner.network());
    set_fused_kernels(true);
    set_host_paths(true);
    (losses, weights, ops)
}

#[test]
fn the_cpu_fast_paths_train_like_the_tensor_path() {
    let _guard = LOCK.lock().unwrap();
    let (op_losses, op_weights, _) = train_four_steps(false, false);
    // The fused kernels on the tensor path (what CUDA runs), then every fast path.
    for (fused, host) in [(true, false), (true, true)] {
        let (losses, weights, _) = train_four_steps(fused, host);
        for (a, b) in losses.iter().zip(&op_losses) {
            assert!(
                (a - b).abs() < 1e-4 * b.abs().max(1.0),
                "fused {fused}, host {host}: loss {a} vs {b}"
            );
        }
        for (a, b) in weights.iter().zip(&op_weights) {
            assert!(
                (a - b).abs() < 1e-4,
                "fused {fused}, host {host}: weight {a} vs {b}"
            );
        }
    }
}

#[test]
fn the_fused_kernels_cut_a_training_steps_ops_by_a_third_at_least() {
    let _guard = LOCK.lock().unwrap();
    let (_, _, written_out) = train_four_steps(false, false);
    let (_, _, fused) = train_four_steps(true, false);
    // Each layer norm is one op forward and one backward instead of dozens; each bias add,
    // ReLU and cross-entropy one each way.
    assert!(
        3 * fused < 2 * written_out,
        "{fused} ops with the fused kernels, {written_out} without"
    );
}
