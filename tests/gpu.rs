//! Tests that need an NVIDIA GPU: compiled with the `cuda` feature (CI compiles them on a
//! machine without one) and marked `#[ignore]`, so they run only when asked:
//!
//! ```sh
//! cargo test --release --features cuda --test gpu -- --ignored --test-threads 1
//! ```
//!
//! `scripts/gpu_first_run.sh` runs them as its second step. Each compares the CUDA path with
//! the CPU path on the same weights and data, so a wrong kernel, a missing synchronisation or a
//! stale copy shows up as a difference, not as a slow drift in a training curve.
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;

use cumind::network::MuZeroNetwork;
use cumind::replay::{Batch, ReplayBuffer};
use cumind::testing::games::{replay_config, RandomGame};
use cumind::testing::specs::tiny_spec;
use cumind::testing::tensors::{uniform, values};
use cumind::train::learner::{Learner, LearnerConfig};
use cumind::train::loss::unrolled_loss;
use cumind::Config;

/// A new handle on GPU `ordinal`, with its own stream, as `cumind` opens it.
fn gpu(ordinal: usize) -> Device {
    Device::new_cuda_with_stream(ordinal).expect("a CUDA device (these tests need a GPU)")
}

fn gpu_count() -> usize {
    candle_core::cuda_backend::cudarc::driver::CudaContext::device_count()
        .map(|n| n as usize)
        .unwrap_or(0)
}

/// A batch of random games for a network over `observation_shape` with `num_actions`.
fn batch(observation_shape: &[usize], num_actions: usize, size: usize) -> Batch {
    let obs_len = observation_shape.iter().product();
    let mut replay = ReplayBuffer::new(replay_config(10_000, 3, 5, 0.97));
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let game = RandomGame {
        obs_len,
        num_actions,
        len: 20,
        rewards: -1.0..1.0,
        root_values: -3.0..3.0,
        terminated: true,
        final_value: 0.0,
    };
    for _ in 0..8 {
        replay.save_game(game.draw(&mut rng)).unwrap();
    }
    replay.sample(size, &mut rng).unwrap()
}

/// Largest |a - b| / (1 + |b|) over two equally long vectors.
fn worst_relative(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f32::max)
}

/// |a - b| / |b| (Euclidean norms) over two equally long vectors.
fn relative_l2(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let diff: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let norm: f32 = b.iter().map(|y| y * y).sum();
    (diff / norm.max(f32::MIN_POSITIVE)).sqrt()
}

/// The unrolled loss and every parameter's gradient, CPU (f32) against CUDA (f32).
fn loss_and_gradients_agree(observation_shape: Vec<usize>, num_actions: usize) {
    let spec = tiny_spec(observation_shape.clone(), num_actions);
    let cpu_net = MuZeroNetwork::new(spec, 5, &Device::Cpu, DType::F32).unwrap();
    let gpu_net = cpu_net.deep_copy(&gpu(0)).unwrap();
    let batch = batch(&observation_shape, num_actions, 32);
    let targets = batch.target_values.clone();
    let cpu_loss = unrolled_loss(&cpu_net, &batch, &targets, 0.25).unwrap();
    let gpu_loss = unrolled_loss(&gpu_net, &batch, &targets, 0.25).unwrap();
    let (c, g) = (values(&cpu_loss.total)[0], values(&gpu_loss.total)[0]);
    assert!(
        (c - g).abs() <= 1e-4 * (1.0 + c.abs()),
        "loss: cpu {c}, cuda {g}"
    );
    let cpu_grads = cpu_loss.total.backward().unwrap();
    let gpu_grads = gpu_loss.total.backward().unwrap();
    let gpu_params: Vec<_> = gpu_net.params().named().collect();
    for ((name, cpu_var), (gpu_name, gpu_var)) in cpu_net.params().named().zip(gpu_params) {
        assert_eq!(name, gpu_name);
        let cg = cpu_grads.get(cpu_var.as_tensor());
        let gg = gpu_grads.get(gpu_var.as_tensor());
        match (cg, gg) {
            (Some(cg), Some(gg)) => {
                let worst = worst_relative(&values(gg), &values(cg));
                assert!(
                    worst < 1e-3,
                    "gradient of {name}: cpu vs cuda differ by {worst}"
                );
            }
            (None, None) => {}
            _ => panic!("{name} has a gradient on one device only"),
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn mlp_loss_and_gradients_match_the_cpu() {
    loss_and_gradients_agree(vec![4], 2);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn conv_loss_and_gradients_match_the_cpu() {
    loss_and_gradients_agree(vec![3, 6, 7], 7);
}

fn learner_config() -> LearnerConfig {
    let mut config = Config::default_config();
    config.training.target_update_frequency = 2;
    cumind::components::learner_config(&config, 100)
}

fn weights(net: &MuZeroNetwork) -> Vec<f32> {
    net.params()
        .named()
        .flat_map(|(_, v)| values(v.as_tensor()))
        .collect()
}

/// Two replicas on CUDA stay bit-identical and match one CPU learner on the whole batch. With
/// one GPU and no `nccl` feature the same GPU is opened twice, which still takes the copy path
/// (gradients moved between device handles, averaged, moved back). NCCL refuses two ranks on
/// one GPU, so an `nccl` build needs two GPUs here.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn replicas_on_cuda_stay_identical_and_match_the_cpu() {
    let devices = if cfg!(feature = "nccl") {
        if gpu_count() < 2 {
            eprintln!("SKIPPED: an nccl build needs 2 GPUs for this test");
            return;
        }
        vec![gpu(0), gpu(1)]
    } else {
        vec![gpu(0), gpu(0)]
    };
    let spec = tiny_spec(vec![4], 2);
    let start = MuZeroNetwork::new(spec, 3, &Device::Cpu, DType::F32).unwrap();
    let mut cpu = Learner::new(start.deep_copy(&Device::Cpu).unwrap(), learner_config()).unwrap();
    let mut cuda = Learner::with_devices(start, learner_config(), &devices).unwrap();
    for step in 0..6 {
        let batch = batch(&[4], 2, 16);
        let a = cpu.train_step(&batch).unwrap();
        let b = cuda.train_step(&batch).unwrap();
        assert!(
            (a.total_loss - b.total_loss).abs() <= 1e-3 * (1.0 + a.total_loss.abs()),
            "step {step}: loss cpu {} vs cuda {}",
            a.total_loss,
            b.total_loss
        );
    }
    let nets = cuda.replica_networks();
    let first = weights(nets[0]);
    assert_eq!(weights(nets[1]), first, "the CUDA replicas diverged");
    let worst = worst_relative(&first, &weights(cpu.network()));
    assert!(worst < 1e-3, "CUDA replicas vs CPU learner: {worst}");
}

/// A search's actions and root values.
type Searched = (Vec<usize>, Vec<f32>);

/// One greedy search of `roots` observations of 4 values by agents over the same weights on
/// the CPU and on CUDA (a copy of the CPU network): each side's actions and root values.
fn searches_on_cpu_and_cuda(
    spec: cumind::network::NetworkSpec,
    config: Config,
    roots: usize,
) -> (Searched, Searched) {
    let cpu_net = MuZeroNetwork::new(spec, 9, &Device::Cpu, DType::F32).unwrap();
    let gpu_net = cpu_net.deep_copy(&gpu(0)).unwrap();
    let observations: Vec<Vec<f32>> = (0..roots)
        .map(|i| (0..4).map(|j| ((i * 4 + j) as f32 * 0.37).sin()).collect())
        .collect();
    let refs: Vec<&[f32]> = observations.iter().map(Vec::as_slice).collect();
    let search = |net| {
        let mut agent = cumind::Agent::from_network(net, config.clone());
        let actions = agent.select_actions(&refs, false).unwrap();
        (actions, agent.last_root_values().to_vec())
    };
    (search(cpu_net), search(gpu_net))
}

/// A search on a CUDA network: legal actions, and root values equal to the CPU's.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn search_on_cuda_matches_the_cpu() {
    let mut config = Config::default_config();
    config.mcts.num_simulations = 16;
    let ((a, va), (b, vb)) = searches_on_cpu_and_cuda(tiny_spec(vec![4], 2), config, 8);
    assert!(b.iter().all(|&x| x < 2), "illegal action from CUDA: {b:?}");
    let worst = worst_relative(&vb, &va);
    assert!(worst < 1e-3, "root values cpu vs cuda differ by {worst}");
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same >= 7, "actions cpu {a:?} vs cuda {b:?}");
}

/// Each fused op (`network::fused`, CUDA kernels in src/network/fused_kernels.cu) against the
/// same op on the CPU, forward and backward, on shapes that are not multiples of a warp or of
/// a block's rows, and on an input that starts at an offset in its storage (a narrowed view).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn fused_kernels_match_the_cpu_forward_and_backward() {
    use candle_core::Var;
    use cumind::network::fused::{add_bias, layer_norm, relu, soft_cross_entropy};
    let cuda = gpu(0);
    let random = |rows: usize, cols: usize, seed: u64| uniform(&[rows, cols], 2.0, seed);
    for (rows, cols) in [(1, 1), (5, 3), (37, 70), (768, 64), (300, 1030)] {
        // Two extra rows in front: the op's input is a view at an offset.
        let x = random(rows + 2, cols, 1);
        let gamma = random(1, cols, 2).squeeze(0).unwrap();
        let beta = random(1, cols, 3).squeeze(0).unwrap();
        let weights = random(rows, cols, 4);
        let targets = candle_nn::ops::softmax_last_dim(&random(rows, cols, 5)).unwrap();
        // The sum of each op's output weighted by fixed values, so every output element
        // carries a different gradient back.
        type Op = dyn Fn(&[Tensor]) -> Tensor;
        let ops: [(&str, Box<Op>); 4] = [
            (
                "layer norm",
                Box::new(|t: &[Tensor]| layer_norm(&t[0], &t[1], &t[2], 1e-5).unwrap()),
            ),
            (
                "bias add",
                Box::new(|t: &[Tensor]| add_bias(&t[0], &t[1]).unwrap()),
            ),
            (
                "relu",
                Box::new(|t: &[Tensor]| relu(&t[0].contiguous().unwrap()).unwrap()),
            ),
            (
                "soft cross-entropy",
                Box::new(|t: &[Tensor]| soft_cross_entropy(&t[0], &t[3]).unwrap()),
            ),
        ];
        for (name, op) in &ops {
            let run = |device: &Device| {
                let vars: Vec<Var> = [&x, &gamma, &beta]
                    .iter()
                    .map(|t| Var::from_tensor(&t.to_device(device).unwrap()).unwrap())
                    .collect();
                let mut inputs: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
                inputs[0] = inputs[0].narrow(0, 2, rows).unwrap();
                inputs.push(targets.to_device(device).unwrap());
                let out = op(&inputs);
                let w = if out.rank() == 1 {
                    weights.narrow(1, 0, 1).unwrap().squeeze(1).unwrap()
                } else {
                    weights.clone()
                };
                let loss = (out.clone() * w.to_device(device).unwrap())
                    .unwrap()
                    .sum_all()
                    .unwrap();
                let grads = loss.backward().unwrap();
                let grads: Vec<Option<Vec<f32>>> = vars
                    .iter()
                    .map(|v| grads.get(v.as_tensor()).map(values))
                    .collect();
                (values(&out), grads)
            };
            let (cpu_out, cpu_grads) = run(&Device::Cpu);
            let (gpu_out, gpu_grads) = run(&cuda);
            let worst = worst_relative(&gpu_out, &cpu_out);
            assert!(
                worst < 1e-4,
                "{name} {rows}x{cols}: outputs differ by {worst}"
            );
            for (i, (c, g)) in cpu_grads.iter().zip(&gpu_grads).enumerate() {
                match (c, g) {
                    (Some(c), Some(g)) => {
                        let worst = worst_relative(g, c);
                        assert!(
                            worst < 1e-3,
                            "{name} {rows}x{cols}: gradient of input {i} differs by {worst}"
                        );
                    }
                    (None, None) => {}
                    _ => panic!("{name}: input {i} has a gradient on one device only"),
                }
            }
        }
    }
}

/// The unfolded convolution (`network::unfold`: CUDA's own im2col, cuBLAS, col2im) against
/// the same construction on the CPU, forward and every gradient, in f32 and bf16: 3x3 and 1x1
/// kernels, a board that is not a multiple of a warp, and a batch whose patches outnumber one
/// grid of threads (the kernels' grid-stride loop).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_unfolded_convolution_matches_the_cpu() {
    use candle_core::Var;
    use cumind::network::unfold::conv2d;
    let cuda = gpu(0);
    let random = |shape: &[usize], seed: u64| uniform(shape, 1.0, seed);
    for (b, c, h, w, o, k) in [
        (2, 5, 6, 7, 3, 3),
        (3, 9, 3, 3, 2, 1),
        (700, 64, 6, 7, 64, 3),
    ] {
        let x = random(&[b, c, h, w], 1);
        let weight = random(&[o, c, k, k], 2);
        let bias = random(&[o], 3);
        let mix = random(&[b, o, h, w], 4);
        // The reference is the CPU in f32 for both dtypes; the error is measured as
        // |gpu - cpu| / |cpu| over the whole tensor (on the CPU, bf16 against f32 gives about
        // 0.003 for each of the four; cuBLAS may run f32 products in TF32).
        for (dtype, tolerance) in [(DType::F32, 5e-3), (DType::BF16, 2e-2)] {
            let run = |device: &Device, dtype: DType| {
                let vars: Vec<Var> = [&x, &weight, &bias]
                    .iter()
                    .map(|t| Var::from_tensor(&t.to_device(device).unwrap()).unwrap())
                    .collect();
                let cast = |v: &Var| v.as_tensor().to_dtype(dtype).unwrap();
                let y = conv2d(&cast(&vars[0]), &cast(&vars[1]), &cast(&vars[2])).unwrap();
                let loss = (y.to_dtype(DType::F32).unwrap() * mix.to_device(device).unwrap())
                    .unwrap()
                    .sum_all()
                    .unwrap();
                let grads = loss.backward().unwrap();
                let grads: Vec<Vec<f32>> = vars
                    .iter()
                    .map(|v| values(grads.get(v.as_tensor()).expect("a gradient")))
                    .collect();
                (values(&y), grads)
            };
            let (cpu_out, cpu_grads) = run(&Device::Cpu, DType::F32);
            let (gpu_out, gpu_grads) = run(&cuda, dtype);
            let case = format!("{b}x{c}x{h}x{w}, {o} filters of {k}x{k}, {dtype:?}");
            let error = relative_l2(&gpu_out, &cpu_out);
            assert!(error < tolerance, "{case}: outputs differ by {error}");
            for (name, (c, g)) in ["input", "filters", "bias"]
                .iter()
                .zip(cpu_grads.iter().zip(&gpu_grads))
            {
                let error = relative_l2(g, c);
                assert!(
                    error < tolerance,
                    "{case}: {name} gradients differ by {error}"
                );
            }
        }
    }
}

/// The implicit-GEMM convolution on the tensor cores (`network::unfold::conv2d_implicit`,
/// bf16) against candle's conv2d on the CPU in f32, forward and every gradient: 1x1, 3x3 and 5x5 kernels, a
/// reduction (C * k * k) that is not a multiple of the kernel's step of 32, more filters than
/// one block's 64, positions that are not a multiple of a block's 128, and Connect Four's
/// dynamics input (64 + 7 planes) at a batch of 700. The output's memory is filled with NaN
/// just before, so an element the kernel never writes shows up.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_implicit_convolution_matches_the_cpu() {
    use candle_core::Var;
    use cumind::network::unfold::{conv2d_implicit, convolves_implicitly};
    let cuda = gpu(0);
    let random = |shape: &[usize], seed: u64| uniform(shape, 1.0, seed);
    for (b, c, h, w, o, k) in [
        (2, 5, 6, 7, 3, 3),
        (3, 9, 3, 3, 2, 1),
        (5, 8, 6, 7, 4, 5),
        (50, 64, 6, 7, 70, 3),
        (700, 71, 6, 7, 64, 3),
        (700, 64, 6, 7, 1, 1),
        // A 5x5 kernel on a 10x10 board, and two tiles of filters.
        (4, 20, 10, 10, 70, 5),
        // Wider than the staging's halo: the gathering kernel.
        (3, 8, 5, 40, 6, 5),
    ] {
        let x = random(&[b, c, h, w], 1);
        let weight = random(&[o, c, k, k], 2);
        let bias = random(&[o], 3);
        let mix = random(&[b, o, h, w], 4);
        let run = |device: &Device, dtype: DType| {
            let vars: Vec<Var> = [&x, &weight, &bias]
                .iter()
                .map(|t| Var::from_tensor(&t.to_device(device).unwrap()).unwrap())
                .collect();
            let cast = |v: &Var| v.as_tensor().to_dtype(dtype).unwrap();
            let input = cast(&vars[0]);
            if device.is_cuda() {
                assert!(convolves_implicitly(&input, k), "the kernel is available");
                let poison = Tensor::full(f32::NAN, (b, o, h, w), device)
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap();
                drop(poison);
            }
            // The reference is candle's own conv2d on the CPU, independent of this op.
            let y = if device.is_cuda() {
                conv2d_implicit(&input, &cast(&vars[1]), &cast(&vars[2])).unwrap()
            } else {
                input
                    .conv2d(&cast(&vars[1]), k / 2, 1, 1, 1)
                    .unwrap()
                    .broadcast_add(&cast(&vars[2]).reshape((1, o, 1, 1)).unwrap())
                    .unwrap()
            };
            let loss = (y.to_dtype(DType::F32).unwrap() * mix.to_device(device).unwrap())
                .unwrap()
                .sum_all()
                .unwrap();
            let grads = loss.backward().unwrap();
            let grads: Vec<Vec<f32>> = vars
                .iter()
                .map(|v| values(grads.get(v.as_tensor()).expect("a gradient")))
                .collect();
            (values(&y), grads)
        };
        let (gpu_out, gpu_grads) = run(&cuda, DType::BF16);
        let (cpu_out, cpu_grads) = run(&Device::Cpu, DType::F32);
        let case = format!("{b}x{c}x{h}x{w}, {o} filters of {k}x{k}");
        assert!(
            gpu_out.iter().all(|v| v.is_finite()),
            "{case}: an output was never written"
        );
        let error = relative_l2(&gpu_out, &cpu_out);
        assert!(error < 2e-2, "{case}: outputs differ by {error}");
        for (name, (c, g)) in ["input", "filters", "bias"]
            .iter()
            .zip(cpu_grads.iter().zip(&gpu_grads))
        {
            let error = relative_l2(g, c);
            assert!(error < 2e-2, "{case}: {name} gradients differ by {error}");
        }
    }
}

/// The layer norm's bf16 kernels (a bf16 input and output with f32 scale and shift, as the
/// conv net's plane norm runs in bf16) against the CPU in f32, forward and every gradient.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_bf16_layer_norm_matches_the_cpu() {
    use candle_core::Var;
    use cumind::network::fused::layer_norm;
    let cuda = gpu(0);
    for (rows, d, seed) in [(5, 3, 1), (37, 70, 2), (1024, 2688, 3)] {
        let x = uniform(&[rows, d], 2.0, seed);
        let gamma = uniform(&[d], 2.0, seed + 10);
        let beta = uniform(&[d], 2.0, seed + 20);
        let mix = uniform(&[rows, d], 1.0, seed + 30);
        let run = |device: &Device, dtype: DType| {
            let vars: Vec<Var> = [&x, &gamma, &beta]
                .iter()
                .map(|t| Var::from_tensor(&t.to_device(device).unwrap()).unwrap())
                .collect();
            let input = vars[0].as_tensor().to_dtype(dtype).unwrap();
            let y = layer_norm(&input, vars[1].as_tensor(), vars[2].as_tensor(), 1e-5).unwrap();
            assert_eq!(y.dtype(), dtype);
            let loss = (y.to_dtype(DType::F32).unwrap() * mix.to_device(device).unwrap())
                .unwrap()
                .sum_all()
                .unwrap();
            let grads = loss.backward().unwrap();
            let grads: Vec<Vec<f32>> = vars
                .iter()
                .map(|v| values(grads.get(v.as_tensor()).expect("a gradient")))
                .collect();
            (values(&y), grads)
        };
        let (gpu_out, gpu_grads) = run(&cuda, DType::BF16);
        let (cpu_out, cpu_grads) = run(&Device::Cpu, DType::F32);
        let error = relative_l2(&gpu_out, &cpu_out);
        assert!(error < 1e-2, "{rows}x{d}: outputs differ by {error}");
        for (name, (c, g)) in ["input", "scale", "shift"]
            .iter()
            .zip(cpu_grads.iter().zip(&gpu_grads))
        {
            let error = relative_l2(g, c);
            assert!(
                error < 2e-2,
                "{rows}x{d}: {name} gradients differ by {error}"
            );
        }
    }
}

/// The fused min-max scaling that inference runs on CUDA (f32 and bf16) against the
/// written-out ops on the CPU, on rows of a conv latent (64 x 6 x 7) and of an MLP latent.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_min_max_scale_kernel_matches_the_written_out_ops() {
    use cumind::network::fused::min_max_scale_rows;
    use cumind::network::layers::min_max_scale;
    let cuda = gpu(0);
    for (rows, d, seed) in [(3, 5, 1), (1000, 32, 2), (700, 2688, 3)] {
        let x = uniform(&[rows, d], 3.0, seed);
        let reference = values(&min_max_scale(&x).unwrap());
        for (dtype, tolerance) in [(DType::F32, 1e-5), (DType::BF16, 1e-2)] {
            let input = x.to_device(&cuda).unwrap().to_dtype(dtype).unwrap();
            let out = min_max_scale_rows(&input).unwrap();
            assert_eq!(out.dtype(), dtype);
            let error = relative_l2(&values(&out), &reference);
            assert!(
                error < tolerance,
                "{rows}x{d} {dtype:?}: differs by {error}"
            );
        }
    }
}

/// A conv network on the Connect Four board with 32 channels and 2 residual blocks.
fn connect_four_conv_spec() -> cumind::network::NetworkSpec {
    let mut spec = tiny_spec(vec![3, 6, 7], 7);
    spec.conv_channels = 32;
    spec.num_blocks = 2;
    spec
}

/// The conv network's inference in bf16 on CUDA (the staged convolution, the norms fused with
/// their ReLU and residual add, the fused min-max scaling) against the CPU in f32: the latents
/// and every head after the representation and after a dynamics step, on Connect Four's board.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn conv_inference_in_bf16_matches_the_cpu() {
    let spec = connect_four_conv_spec();
    let cpu_net = MuZeroNetwork::new(spec.clone(), 21, &Device::Cpu, DType::F32).unwrap();
    let tensors = cpu_net.params().to_tensors().unwrap();
    let gpu_net = MuZeroNetwork::from_tensors(spec, tensors, &gpu(0), DType::BF16).unwrap();
    let boards = 300;
    let observations: Vec<f32> = (0..boards * 3 * 42)
        .map(|i| f32::from((i * 7919) % 5 < 2))
        .collect();
    let actions: Vec<usize> = (0..boards).map(|i| (i * 3) % 7).collect();
    let run = |net: &MuZeroNetwork| {
        let net = net.inference_copy().unwrap();
        let latent = net
            .represent(&net.observation_tensor(&observations).unwrap())
            .unwrap();
        let (policy, value) = net.predict(&latent).unwrap();
        let (next, reward) = net
            .dynamics(&latent, &net.action_tensor(&actions).unwrap())
            .unwrap();
        let (next_policy, next_value) = net.predict(&next).unwrap();
        [latent, policy, value, next, reward, next_policy, next_value].map(|t| values(&t))
    };
    let (cpu, cuda) = (run(&cpu_net), run(&gpu_net));
    let names = [
        "latent",
        "policy",
        "value",
        "next latent",
        "reward",
        "next policy",
        "next value",
    ];
    for ((name, c), g) in names.iter().zip(&cpu).zip(&cuda) {
        assert!(g.iter().all(|v| v.is_finite()), "{name}: not finite");
        let error = relative_l2(g, c);
        assert!(
            error < 5e-2,
            "{name}: cuda bf16 and cpu f32 differ by {error}"
        );
    }
}

/// The norm fused with its residual add and ReLU (`fused::layer_norm_then_op`) on CUDA, f32
/// and bf16, against the same op on the CPU in f32: a scale and shift per feature, and per
/// channel of a board (groups of 42, which the bf16 kernel's 8-value words straddle).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_layer_norm_then_kernel_matches_the_cpu() {
    use cumind::network::fused::layer_norm_then_op;
    let cuda = gpu(0);
    for (rows, d, group, seed) in [
        (5, 3, 1, 1),
        (37, 70, 1, 2),
        (37, 70, 7, 3),
        (700, 2688, 42, 4),
    ] {
        let x = uniform(&[rows, d], 2.0, seed);
        let residual = uniform(&[rows, d], 2.0, seed + 5);
        let gamma = uniform(&[d / group], 2.0, seed + 10);
        let beta = uniform(&[d / group], 2.0, seed + 20);
        for (with_residual, relu) in [(false, false), (false, true), (true, true)] {
            let r = with_residual.then_some(&residual);
            let reference =
                values(&layer_norm_then_op(&x, r, &gamma, &beta, group, 1e-5, relu).unwrap());
            for (dtype, tolerance) in [(DType::F32, 1e-5), (DType::BF16, 1e-2)] {
                let on_gpu = |t: &Tensor| t.to_device(&cuda).unwrap();
                let input = on_gpu(&x).to_dtype(dtype).unwrap();
                let res = on_gpu(&residual).to_dtype(dtype).unwrap();
                let out = layer_norm_then_op(
                    &input,
                    with_residual.then_some(&res),
                    &on_gpu(&gamma),
                    &on_gpu(&beta),
                    group,
                    1e-5,
                    relu,
                )
                .unwrap();
                assert_eq!(out.dtype(), dtype);
                let error = relative_l2(&values(&out), &reference);
                assert!(
                    error < tolerance,
                    "{rows}x{d} in groups of {group}, {dtype:?}, residual {with_residual}, relu {relu}: differs by {error}"
                );
            }
        }
    }
}

/// The search's row gather (`fused::gather_rows`) on CUDA against index_select on the CPU: rows
/// copied in 16-byte words (a conv latent), in 4-byte words (odd widths, f32 and bf16), and
/// from a source that starts at an offset.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_row_gather_matches_index_select() {
    use cumind::network::fused::gather_rows;
    let cuda = gpu(0);
    for (n, width, dtype, skip) in [
        (300, 2688, DType::BF16, 0),
        (50, 6, DType::BF16, 0),
        (50, 5, DType::F32, 0),
        (50, 64, DType::BF16, 2),
    ] {
        let all = uniform(&[n + skip, width], 1.0, 7).to_dtype(dtype).unwrap();
        let src = all.narrow(0, skip, n).unwrap();
        let picks: Vec<u32> = (0..97).map(|i| (i * 31 % n) as u32).collect();
        let index = Tensor::from_vec(picks.clone(), 97, &Device::Cpu).unwrap();
        let want = values(&src.index_select(&index, 0).unwrap());
        let on_gpu = all.to_device(&cuda).unwrap().narrow(0, skip, n).unwrap();
        let got = gather_rows(&on_gpu, &index.to_device(&cuda).unwrap()).unwrap();
        assert_eq!(got.dims(), &[97, width]);
        assert_eq!(values(&got), want, "{n}x{width} {dtype:?} from row {skip}");
    }
}

/// A search model's recurrent inferences replayed from a CUDA graph
/// (`SearchModel::with_cuda_graphs`) against the same calls op by op on the same device: the
/// same kernels on the same inputs, so the same numbers. A conv network in bf16 and an MLP in
/// f32, six calls each (the first runs op by op, the second is captured, the rest replay),
/// with parents that are earlier calls' children, so the latents the graph stored are read
/// back by later calls.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn recurrent_inference_from_a_cuda_graph_matches_op_by_op() {
    use cumind::model::Model;
    use cumind::network::SearchModel;
    let conv = connect_four_conv_spec();
    // As `cumind` opens one GPU: without cudarc's event tracking, which a capture cannot
    // take in (each op would wait on events recorded before it).
    let device = gpu(0);
    let context = device
        .as_cuda_device()
        .unwrap()
        .cuda_stream()
        .context()
        .clone();
    // SAFETY: this device's one stream runs all of this test's work.
    unsafe { context.disable_event_tracking() };
    for (spec, dtype) in [(conv, DType::BF16), (tiny_spec(vec![4], 2), DType::F32)] {
        let net = MuZeroNetwork::new(spec.clone(), 5, &device, dtype).unwrap();
        let a = spec.num_actions;
        let batch = 37;
        let observations: Vec<f32> = (0..batch * spec.obs_len())
            .map(|i| ((i * 7919) % 11) as f32 / 11.0)
            .collect();
        let run = |graphs: bool| {
            let mut model = SearchModel::on_tensors(&net).with_cuda_graphs(graphs);
            let mut out = vec![model.initial_inference(&observations, batch, 8).unwrap()];
            for node in 1..7 {
                let parents: Vec<usize> = (0..batch).map(|i| (i + node) % node).collect();
                let actions: Vec<usize> = (0..batch).map(|i| (i * 3 + node) % a).collect();
                out.push(model.recurrent_inference(&parents, &actions, node).unwrap());
            }
            (out, model.replays_cuda_graph(), model.cuda_graph_fallback())
        };
        let ((eager, off, _), (graphed, on, why)) = (run(false), run(true));
        assert!(!off, "{dtype:?}: a graph without with_cuda_graphs(true)");
        assert!(
            on,
            "{dtype:?}: the calls were not replayed from a graph (capture failed: {why:?})"
        );
        for (call, (e, g)) in eager.iter().zip(&graphed).enumerate() {
            for (name, x, y) in [
                ("policy", &e.policy_logits, &g.policy_logits),
                ("value", &e.values, &g.values),
                ("reward", &e.rewards, &g.rewards),
            ] {
                assert_eq!(x.len(), y.len(), "call {call} {name}: lengths");
                let worst = x
                    .iter()
                    .zip(y.iter())
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst <= 1e-5,
                    "{dtype:?} call {call} {name}: graph and op by op differ by {worst}"
                );
            }
        }
    }
}

/// The MLP's search calls as one CUDA kernel each (`network::cuda_mlp`) against the host MLP on
/// the CPU on the same weights: the initial inference, then seven recurrent ones whose parents
/// are earlier calls' children (so the latents the kernel stored are read back). f32 and bf16
/// networks (the kernels compute in f32 either way); CartPole's default sizes (64 hidden, wider
/// than a warp; a value support of 41) and a network with two residual blocks, odd widths,
/// scaled observations and a reward support without MuZero's transform; batches of 1, 37, 300
/// (one tree a warp) and 2,101 (four a warp, the last warp part full). The values and rewards are
/// decoded on the device, so this checks the decoding too.
/// An action out of range is an error, not a read past the weights.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_one_kernel_mlp_calls_match_the_host_mlp() {
    use cumind::model::{Model, Prediction};
    use cumind::network::{NetworkSpec, SearchModel};
    use cumind::support::{Support, Transform};
    let device = gpu(0);
    let cartpole = NetworkSpec {
        hidden_dim: 64,
        latent_dim: 32,
        num_blocks: 0,
        value_support: Support::symmetric(20),
        reward_support: Support::symmetric(3),
        ..tiny_spec(vec![4], 2)
    };
    let odd = NetworkSpec {
        hidden_dim: 45,
        latent_dim: 7,
        num_blocks: 2,
        observation_scale: vec![0.5, 2.0, 1.0, 3.0, 0.25],
        reward_support: Support::symmetric(2).with_transform(Transform::None),
        ..tiny_spec(vec![5], 3)
    };
    for spec in [cartpole, odd] {
        let cpu = MuZeroNetwork::new(spec.clone(), 9, &Device::Cpu, DType::F32).unwrap();
        for dtype in [DType::F32, DType::BF16] {
            let tensors = cpu.params().to_tensors().unwrap();
            let net = MuZeroNetwork::from_tensors(spec.clone(), tensors, &device, dtype).unwrap();
            for batch in [1, 37, 300, 2101] {
                let a = spec.num_actions;
                let observations: Vec<f32> = (0..batch * spec.obs_len())
                    .map(|i| ((i * 7919) % 23) as f32 / 11.0 - 1.0)
                    .collect();
                let run = |model: &mut SearchModel| -> Vec<Prediction> {
                    let mut out = vec![model.initial_inference(&observations, batch, 9).unwrap()];
                    for node in 1..8 {
                        let parents: Vec<usize> = (0..batch).map(|i| (i + node) % node).collect();
                        let actions: Vec<usize> = (0..batch).map(|i| (i * 3 + node) % a).collect();
                        out.push(model.recurrent_inference(&parents, &actions, node).unwrap());
                    }
                    out
                };
                let mut on_gpu = SearchModel::new(&net);
                assert!(
                    on_gpu.runs_one_kernel_per_call(),
                    "{dtype:?}: the MLP on CUDA does not run one kernel per call"
                );
                let (got, want) = (run(&mut on_gpu), run(&mut SearchModel::new(&cpu)));
                for (call, (g, w)) in got.iter().zip(&want).enumerate() {
                    for (name, x, y) in [
                        ("policy", &g.policy_logits, &w.policy_logits),
                        ("value", &g.values, &w.values),
                        ("reward", &g.rewards, &w.rewards),
                    ] {
                        let worst = worst_relative(x, y);
                        assert!(
                            worst <= 1e-4,
                            "hidden {} {dtype:?} batch {batch} call {call} {name}: \
                             kernel and host differ by {worst}",
                            spec.hidden_dim
                        );
                    }
                }
                let bad = on_gpu.recurrent_inference(&vec![0; batch], &vec![a; batch], 8);
                assert!(bad.is_err(), "action {a} of {a} was accepted");
            }
        }
    }
}

/// bf16 patches on CUDA (`im2col`: the 16-byte-store kernel where a patch row is whole 8-entry
/// chunks, one thread per row and channel otherwise) against the CPU's, entry for entry: 3x3
/// over 64 channels (the conv ResNet's filter gradients), 1x1 over 8, 5x5 over 16, and rows that
/// are not whole chunks (3x3 over 71 and over 3 channels).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_bf16_patches_match_the_cpu() {
    use cumind::network::unfold::im2col;
    let cuda = gpu(0);
    for (c, k) in [(64, 3), (8, 1), (16, 5), (71, 3), (3, 3)] {
        let x = uniform(&[5, c, 6, 7], 1.0, 3)
            .to_dtype(DType::BF16)
            .unwrap();
        let want = values(&im2col(&x, k).unwrap());
        let got = values(&im2col(&x.to_device(&cuda).unwrap(), k).unwrap());
        assert_eq!(got, want, "{c} channels, {k}x{k}");
    }
}

/// A search of 63 roots with CartPole's network on CUDA, its calls one kernel each (four trees
/// a warp), against the same search on the CPU's host MLP (63 roots, the most the CPU searches
/// whole, so both draw the same random numbers): every action legal, and nearly every root's
/// value and action the same (a difference in the last bits of a call can tip a close choice).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_large_one_kernel_search_matches_the_cpu() {
    use cumind::network::NetworkSpec;
    use cumind::support::Support;
    let spec = NetworkSpec {
        hidden_dim: 64,
        latent_dim: 32,
        num_blocks: 0,
        value_support: Support::symmetric(20),
        reward_support: Support::symmetric(3),
        ..tiny_spec(vec![4], 2)
    };
    let ((a, va), (b, vb)) = searches_on_cpu_and_cuda(spec, Config::default_config(), 63);
    assert!(b.iter().all(|&x| x < 2), "illegal action from CUDA: {b:?}");
    let close = va
        .iter()
        .zip(&vb)
        .filter(|(x, y)| (*x - *y).abs() <= 1e-3 * (1.0 + y.abs()))
        .count();
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(close >= 60, "{close} of 63 root values agree");
    assert!(same >= 60, "{same} of 63 actions agree");
}
