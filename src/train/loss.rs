//! MuZero's K-step unrolled loss (Schrittwieser et al. 2020, appendix G).
//!
//! For k = 0..=K: value cross-entropy and reward cross-entropy (k >= 1; with a value prefix,
//! against the sums of the rewards since the last reset point) against two-hot targets on the
//! categorical supports, and policy cross-entropy against the search policy. The
//! gradient entering the dynamics is scaled by 1/2, the losses of steps k >= 1 by 1/K, and each
//! sample by its importance weight. Reduced in f32.
//!
//! With a consistency weight and a network with projection heads, each step k >= 1 also adds
//! EfficientZero's temporal consistency loss: the negative cosine similarity between
//! `predictor(projector(s_k))`, `s_k` the dynamics' latent, and `projector(h(o_{t+k}))`, the
//! real observation's representation, under a stop-gradient (SimSiam). Steps past the game's
//! last observation are masked out.

use candle_core::{DType, Tensor};

use crate::network::fused::soft_cross_entropy;
use crate::network::layers::scale_gradient;
use crate::network::value_prefix::is_reset;
use crate::network::{MuZeroNetwork, NetworkError};
use crate::replay::Batch;

/// The loss of one batch, still on the device: the tensor to differentiate and what the
/// logs and the priorities need, read later in one copy ([`LossOutput::read`]).
pub struct LossOutput {
    /// Scalar f32 tensor (weighted mean over the batch).
    pub total: Tensor,
    /// `[4]` f32: the unweighted per-head means over the batch (value, reward, policy,
    /// consistency), summed over unroll steps with 1/K for k >= 1.
    pub parts: Tensor,
    /// `[B, value_support]` f32: the value logits at k = 0 (for the new priorities).
    pub first_value_logits: Tensor,
    /// The value targets at k = 0, `[B]` (host side already).
    first_targets: Vec<f32>,
}

/// The numbers of a [`LossOutput`], on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct LossValues {
    pub total: f32,
    pub value: f32,
    pub reward: f32,
    pub policy: f32,
    /// Negative cosine similarity of the consistency loss (0 when off), in [-1, 1].
    pub consistency: f32,
    /// New priorities: |predicted value at k = 0 - value target at k = 0|, `[B]`.
    pub priorities: Vec<f32>,
    /// The scalars passed to [`LossOutput::read`] as `extra`, in order.
    pub extra: Vec<f32>,
}

impl LossOutput {
    /// Everything in one device-to-host copy (one blocking synchronisation on a GPU), with the
    /// scalar tensors in `extra` (for example the gradient norm) read in the same copy.
    pub fn read(
        &self,
        network: &MuZeroNetwork,
        extra: &[&Tensor],
    ) -> Result<LossValues, NetworkError> {
        let mut pieces = vec![self.total.reshape(1)?, self.parts.clone()];
        for t in extra {
            pieces.push(t.to_dtype(DType::F32)?.reshape(1)?);
        }
        pieces.push(self.first_value_logits.flatten_all()?);
        let all = crate::op_count::read_f32(&Tensor::cat(&pieces, 0)?)?;
        let head = 5 + extra.len();
        let first_values = network.spec().value_support.logits_to_scalars(&all[head..]);
        Ok(LossValues {
            total: all[0],
            value: all[1],
            reward: all[2],
            policy: all[3],
            consistency: all[4],
            priorities: first_values
                .iter()
                .zip(&self.first_targets)
                .map(|(v, z)| (v - z).abs())
                .collect(),
            extra: all[5..head].to_vec(),
        })
    }
}

/// Weights of the loss terms (reward and policy have weight 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossWeights {
    pub value: f64,
    /// The consistency loss (0: off; ignored for a network without projection heads).
    pub consistency: f64,
}

/// Compute the unrolled loss of `batch` with `target_values` (`[B * (K+1)]`, the batch's own
/// targets or ones re-bootstrapped with a target network), without the consistency loss.
pub fn unrolled_loss(
    network: &MuZeroNetwork,
    batch: &Batch,
    target_values: &[f32],
    value_loss_weight: f64,
) -> Result<LossOutput, NetworkError> {
    let weights = LossWeights {
        value: value_loss_weight,
        consistency: 0.0,
    };
    unrolled_loss_with(network, batch, target_values, &weights)
}

/// [`unrolled_loss`] with every term's weight.
pub fn unrolled_loss_with(
    network: &MuZeroNetwork,
    batch: &Batch,
    target_values: &[f32],
    loss_weights: &LossWeights,
) -> Result<LossOutput, NetworkError> {
    let value_loss_weight = loss_weights.value;
    let spec = network.spec();
    let device = network.device();
    let b = batch.batch_size;
    let k_steps = batch.num_unroll_steps;
    let a = batch.num_actions;
    let steps = k_steps + 1;

    // Host-side targets, step-major ([K+1, B, ...]) so that each step's slice is contiguous.
    let vs = spec.value_support.size();
    let rs = spec.reward_support.size();
    let value_probs = spec.value_support.scalars_to_probs(target_values);
    // With a value prefix the reward head learns the sums of the rewards since the last
    // reset point of the unroll (see `crate::network::value_prefix`).
    let reward_probs = if network.has_value_prefix() {
        let prefixes = batch.value_prefix_targets(spec.value_prefix_horizon);
        spec.reward_support.scalars_to_probs(&prefixes)
    } else {
        spec.reward_support.scalars_to_probs(&batch.target_rewards)
    };
    let per_step = |data: &[f32], n: usize| {
        Tensor::from_vec(step_major(data, b, steps, n), (steps * b, n), device)
    };
    let value_targets = per_step(&value_probs, vs)?;
    let reward_targets = per_step(&reward_probs, rs)?;
    let policy_targets = per_step(&batch.target_policies, a)?;

    // Every head's loss is computed once over all unrolled steps (`[(K+1) B]` rows,
    // step-major), then weighted per row by host-side coefficients that hold the step's
    // scale (1 for k = 0, 1/K after), the mask, the importance weight and 1/B: a handful of
    // ops instead of a set per step (each op is a kernel launch on a GPU).
    let scale = |k: usize| if k == 0 { 1.0 } else { 1.0 / k_steps as f32 };
    let inv_b = 1.0 / b as f32;
    let row_coefficients = |mask: &[f32], first_step: usize, weight: f32, importance: bool| {
        let mut out = Vec::with_capacity((steps - first_step) * b);
        for k in first_step..steps {
            for i in 0..b {
                let w = if importance { batch.weights[i] } else { 1.0 };
                out.push(weight * scale(k) * mask[i * steps + k] * w * inv_b);
            }
        }
        Tensor::from_vec(out, (steps - first_step) * b, device)
    };
    let value_weight = value_loss_weight as f32;

    // Consistency targets: the projected representations of the real observations at
    // t+1..t+K, in one batch, without gradient; `[K B, P]`.
    let consistency = if loss_weights.consistency > 0.0 && k_steps > 0 {
        let o = batch.obs_len;
        let unrolled = step_major(&batch.unroll_observations, b, steps, o);
        let later = network.observation_tensor(&unrolled[b * o..])?;
        match network.project(&network.represent(&later)?, false)? {
            Some(projected) => Some(l2_normalize(&projected.detach())?),
            None => None,
        }
    } else {
        None
    };

    // The unroll: K dynamics steps, keeping every step's latent and reward logits.
    let observations = network.observation_tensor(&batch.observations)?;
    let mut latent = network.represent(&observations)?;
    let mut latents = Vec::with_capacity(steps);
    let mut reward_logits = Vec::with_capacity(k_steps);
    latents.push(latent.clone());
    let mut prefix_state = None;
    for k in 1..steps {
        let actions: Vec<usize> = (0..b).map(|i| batch.actions[i * k_steps + k - 1]).collect();
        let one_hot = network.action_tensor(&actions)?;
        if is_reset(k - 1, spec.value_prefix_horizon) {
            prefix_state = None;
        }
        let (next, reward, state) = network.dynamics_step(
            &scale_gradient(&latent, 0.5)?,
            &one_hot,
            prefix_state.as_ref(),
        )?;
        prefix_state = state;
        latent = next;
        latents.push(latent.clone());
        reward_logits.push(reward);
    }
    // One prediction over every step's latent: the prediction network sees each row alone
    // (layer norm is per row), so this equals K+1 separate calls.
    let (policy_logits, value_logits) = network.predict(&Tensor::cat(&latents, 0)?)?;
    let first_value_logits = value_logits.narrow(0, 0, b)?.detach();

    let value_ce = soft_cross_entropy(&value_logits, &value_targets)?;
    let policy_ce = soft_cross_entropy(&policy_logits, &policy_targets)?;
    let weighted = |ce: &Tensor, coefficients: &Tensor| (ce * coefficients)?.sum_all();
    let mut total = (weighted(
        &value_ce,
        &row_coefficients(&batch.value_mask, 0, value_weight, true)?,
    )? + weighted(
        &policy_ce,
        &row_coefficients(&batch.policy_mask, 0, 1.0, true)?,
    )?)?;
    let zero = Tensor::zeros((), DType::F32, device)?;
    let mut part_values = vec![
        weighted(
            &value_ce.detach(),
            &row_coefficients(&batch.value_mask, 0, 1.0, false)?,
        )?,
        zero.clone(),
        weighted(
            &policy_ce.detach(),
            &row_coefficients(&batch.policy_mask, 0, 1.0, false)?,
        )?,
        zero,
    ];
    if k_steps > 0 {
        // Rewards of steps 1..=K, masked like the values.
        let reward_ce = soft_cross_entropy(
            &Tensor::cat(&reward_logits, 0)?,
            &reward_targets.narrow(0, b, k_steps * b)?,
        )?;
        total = (total
            + weighted(
                &reward_ce,
                &row_coefficients(&batch.value_mask, 1, 1.0, true)?,
            )?)?;
        part_values[1] = weighted(
            &reward_ce.detach(),
            &row_coefficients(&batch.value_mask, 1, 1.0, false)?,
        )?;
        if let Some(targets) = &consistency {
            let online = network
                .project(&Tensor::cat(&latents[1..], 0)?, true)?
                .expect("consistency targets come from the projection heads");
            let negative_cosine = (l2_normalize(&online)? * targets)?.sum(1)?.neg()?;
            let weight = loss_weights.consistency as f32;
            total = (total
                + weighted(
                    &negative_cosine,
                    &row_coefficients(&batch.observation_mask, 1, weight, true)?,
                )?)?;
            part_values[3] = weighted(
                &negative_cosine.detach(),
                &row_coefficients(&batch.observation_mask, 1, 1.0, false)?,
            )?;
        }
    }
    Ok(LossOutput {
        total,
        parts: Tensor::stack(&part_values, 0)?,
        first_value_logits,
        first_targets: (0..b).map(|i| target_values[i * steps]).collect(),
    })
}

/// Rows scaled to unit Euclidean norm (f32), `[B, P]`.
fn l2_normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = (x.sqr()?.sum_keepdim(1)? + 1e-12)?.sqrt()?;
    x.broadcast_div(&norm)
}

/// `[B, S, n]` row-major -> `[S, B, n]`.
fn step_major(data: &[f32], b: usize, steps: usize, n: usize) -> Vec<f32> {
    debug_assert_eq!(data.len(), b * steps * n);
    let mut out = Vec::with_capacity(data.len());
    for k in 0..steps {
        for i in 0..b {
            let at = (i * steps + k) * n;
            out.extend_from_slice(&data[at..at + n]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkSpec;
    use crate::replay::{ReplayBuffer, ReplayConfig};
    use crate::testing::games::RandomGame;
    use crate::train::optimizer::{AdamW, AdamWConfig};
    use candle_core::Device;
    use rand::SeedableRng;

    fn spec() -> NetworkSpec {
        crate::testing::specs::tiny_spec(vec![4], 3)
    }

    /// AdamW over every parameter of `net`, without weight decay.
    fn adamw(net: &MuZeroNetwork, learning_rate: f64, max_grad_norm: f64) -> AdamW {
        let named = net
            .params()
            .named()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        AdamW::new(
            named,
            AdamWConfig {
                learning_rate,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
                max_grad_norm,
            },
        )
        .unwrap()
    }

    /// A buffer of random games with non-trivial rewards, values and policies.
    fn buffer(seed: u64) -> ReplayBuffer {
        buffer_with(seed, 4)
    }

    fn buffer_with(seed: u64, obs_len: usize) -> ReplayBuffer {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut replay = ReplayBuffer::new(ReplayConfig {
            capacity: 1000,
            num_unroll_steps: 3,
            td_steps: 3,
            discount: 0.9,
            per_alpha: 1.0,
            per_beta: 1.0,
            per_epsilon: 1e-3,
            two_player: false,
            max_bytes: 0,
            td_age_transitions: 0,
            symmetries: Vec::new(),
        });
        for g in 0..6 {
            let game = RandomGame {
                obs_len,
                num_actions: 3,
                len: 5 + g,
                rewards: -1.0..2.0,
                root_values: -3.0..3.0,
                terminated: g % 2 == 0,
                final_value: 1.5,
            };
            replay.save_game(game.draw(&mut rng)).unwrap();
        }
        replay
    }

    #[test]
    fn every_parameter_receives_a_nonzero_gradient() {
        all_parameters_get_gradients(spec(), buffer(1), 0.0);
    }

    /// A spec with EfficientZero's projection heads.
    fn with_projection(spec: NetworkSpec) -> NetworkSpec {
        NetworkSpec {
            projection_dim: 12,
            ..spec
        }
    }

    #[test]
    fn the_consistency_loss_gives_every_parameter_a_gradient_mlp_and_conv() {
        all_parameters_get_gradients(with_projection(spec()), buffer(1), 2.0);
        let conv = NetworkSpec {
            observation_shape: vec![2, 3, 4],
            ..with_projection(spec())
        };
        all_parameters_get_gradients(conv, buffer_with(11, 24), 2.0);
    }

    #[test]
    fn without_its_weight_the_projection_heads_get_no_gradient_and_change_nothing() {
        let plain = MuZeroNetwork::new(spec(), 3, &Device::Cpu, DType::F32).unwrap();
        let heads =
            MuZeroNetwork::new(with_projection(spec()), 3, &Device::Cpu, DType::F32).unwrap();
        let batch = buffer(1)
            .sample(16, &mut rand::rngs::StdRng::seed_from_u64(2))
            .unwrap();
        let a = unrolled_loss(&plain, &batch, &batch.target_values, 0.25).unwrap();
        let b = unrolled_loss(&heads, &batch, &batch.target_values, 0.25).unwrap();
        // The heads are built last: the same seed draws the same trunk weights.
        assert_eq!(
            a.total.to_scalar::<f32>().unwrap(),
            b.total.to_scalar::<f32>().unwrap()
        );
        let grads = b.total.backward().unwrap();
        for (name, var) in heads.params().named() {
            assert_eq!(
                grads.get(var.as_tensor()).is_some(),
                !name.starts_with("projection."),
                "{name}"
            );
        }
    }

    #[test]
    fn the_consistency_loss_falls_on_a_fixed_batch() {
        let net = MuZeroNetwork::new(with_projection(spec()), 4, &Device::Cpu, DType::F32).unwrap();
        let batch = buffer(5)
            .sample(32, &mut rand::rngs::StdRng::seed_from_u64(6))
            .unwrap();
        let mut opt = adamw(&net, 3e-3, 10.0);
        let weights = LossWeights {
            value: 0.25,
            consistency: 2.0,
        };
        let mut first = None;
        let mut last = None;
        for _ in 0..100 {
            let loss = unrolled_loss_with(&net, &batch, &batch.target_values, &weights).unwrap();
            let values = loss.read(&net, &[]).unwrap();
            first.get_or_insert(values.consistency);
            last = Some(values.consistency);
            opt.step(&loss.total.backward().unwrap(), 3e-3).unwrap();
        }
        let (first, last) = (first.unwrap(), last.unwrap());
        // A negative cosine similarity, averaged with masked (zero) steps: in [-1, 1].
        assert!((-1.0..=1.0).contains(&first) && (-1.0..=1.0).contains(&last));
        assert!(last < first - 0.2, "consistency loss {first} -> {last}");
    }

    /// A spec with EfficientZero's value prefix, resetting every `horizon` steps.
    fn with_value_prefix(spec: NetworkSpec, horizon: usize) -> NetworkSpec {
        NetworkSpec {
            value_prefix_dim: 6,
            value_prefix_horizon: horizon,
            ..spec
        }
    }

    /// With a horizon of 2 and K = 3 the LSTM carries its state from step 1 to step 2, so its
    /// recurrent weights get a gradient too.
    #[test]
    fn the_value_prefix_gives_every_parameter_a_gradient_mlp_and_conv() {
        all_parameters_get_gradients(with_value_prefix(spec(), 2), buffer(1), 0.0);
        let conv = NetworkSpec {
            observation_shape: vec![2, 3, 4],
            ..with_value_prefix(spec(), 0)
        };
        all_parameters_get_gradients(conv, buffer_with(11, 24), 0.0);
    }

    #[test]
    fn the_value_prefix_loss_falls_on_a_fixed_batch() {
        loss_falls_in(with_value_prefix(spec(), 2), DType::F32);
    }

    /// bf16 compute (CUDA's default) through the LSTM's gates and state.
    #[test]
    fn the_value_prefix_loss_falls_on_a_fixed_batch_in_bf16() {
        loss_falls_in(with_value_prefix(spec(), 2), DType::BF16);
    }

    /// The reward part of the loss is the cross-entropy against the prefix targets: computed
    /// here step by step from the network's own dynamics, resetting the state at depth 2.
    #[test]
    fn the_value_prefix_head_is_trained_on_sums_of_rewards() {
        let net =
            MuZeroNetwork::new(with_value_prefix(spec(), 2), 5, &Device::Cpu, DType::F32).unwrap();
        let batch = buffer(3)
            .sample(8, &mut rand::rngs::StdRng::seed_from_u64(1))
            .unwrap();
        // The reward head's last layer starts at zero (uniform logits, whatever the targets):
        // a few updates first.
        let mut opt = adamw(&net, 1e-2, 0.0);
        for _ in 0..5 {
            let loss = unrolled_loss(&net, &batch, &batch.target_values, 0.25).unwrap();
            opt.step(&loss.total.backward().unwrap(), 1e-2).unwrap();
        }
        let values = unrolled_loss(&net, &batch, &batch.target_values, 0.25)
            .unwrap()
            .read(&net, &[])
            .unwrap();
        let (b, k_steps) = (batch.batch_size, batch.num_unroll_steps);
        let steps = k_steps + 1;
        let prefixes = batch.value_prefix_targets(2);
        assert_ne!(
            prefixes, batch.target_rewards,
            "a batch where the two differ"
        );
        let support = &net.spec().reward_support;
        let mut latent = net
            .represent(&net.observation_tensor(&batch.observations).unwrap())
            .unwrap();
        let mut state = None;
        let mut expected = 0.0f32;
        for k in 1..steps {
            let actions: Vec<usize> = (0..b).map(|i| batch.actions[i * k_steps + k - 1]).collect();
            if k - 1 == 2 {
                state = None;
            }
            let (next, logits, s) = net
                .dynamics_step(
                    &latent,
                    &net.action_tensor(&actions).unwrap(),
                    state.as_ref(),
                )
                .unwrap();
            let logits = logits.to_vec2::<f32>().unwrap();
            for i in 0..b {
                let target = support.scalars_to_probs(&[prefixes[i * steps + k]]);
                let row = &logits[i];
                let max = row.iter().cloned().fold(f32::MIN, f32::max);
                let log_sum = row.iter().map(|x| (x - max).exp()).sum::<f32>().ln() + max;
                let ce: f32 = target
                    .iter()
                    .zip(row)
                    .map(|(t, x)| -t * (x - log_sum))
                    .sum();
                expected += ce * batch.value_mask[i * steps + k] / (k_steps * b) as f32;
            }
            latent = next;
            state = s;
        }
        assert!(
            (values.reward - expected).abs() < 1e-4,
            "reward loss {} against {expected} by hand",
            values.reward
        );
    }

    #[test]
    fn conv_network_parameters_all_receive_gradients() {
        let conv = NetworkSpec {
            observation_shape: vec![2, 3, 4],
            ..spec()
        };
        assert!(conv.uses_conv());
        assert_eq!(conv.latent_shape(), vec![4, 3, 4]);
        all_parameters_get_gradients(conv, buffer_with(11, 24), 0.0);
    }

    /// Wider 1 x 1 convolutions in front of the heads (EfficientZero's reduced channels):
    /// each head's convolution and first layer take the chosen planes, and every parameter
    /// learns.
    #[test]
    fn the_conv_heads_take_the_chosen_planes_and_all_learn() {
        let conv = NetworkSpec {
            observation_shape: vec![2, 3, 4],
            value_head_channels: 3,
            policy_head_channels: 4,
            reward_head_channels: 2,
            ..spec()
        };
        assert_eq!(conv.reward_features_dim(), 2 * 12);
        let net = MuZeroNetwork::new(conv.clone(), 3, &Device::Cpu, DType::F32).unwrap();
        let params = net.params();
        let dims = |name: &str| params.get(name).unwrap().as_tensor().dims().to_vec();
        let hidden = conv.hidden_dim;
        assert_eq!(dims("prediction.value_conv.weight"), vec![3, 4, 1, 1]);
        assert_eq!(dims("prediction.policy_conv.weight"), vec![4, 4, 1, 1]);
        assert_eq!(dims("dynamics.reward_conv.weight"), vec![2, 4, 1, 1]);
        assert_eq!(dims("prediction.value_hidden.weight"), vec![hidden, 3 * 12]);
        assert_eq!(dims("dynamics.reward_hidden.weight"), vec![hidden, 2 * 12]);
        assert_eq!(dims("prediction.policy_out.weight"), vec![3, 4 * 12]);
        all_parameters_get_gradients(conv, buffer_with(11, 24), 0.0);
    }

    fn all_parameters_get_gradients(spec: NetworkSpec, replay: ReplayBuffer, consistency: f64) {
        let weights = LossWeights {
            value: 0.25,
            consistency,
        };
        let net = MuZeroNetwork::new(spec, 3, &Device::Cpu, DType::F32).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let batch = replay.sample(16, &mut rng).unwrap();
        // The last layers of the value and reward heads start at zero, so the layers before
        // them get no gradient until one update has moved those weights: take one step first.
        let mut opt = adamw(&net, 1e-3, 0.0);
        let first = unrolled_loss_with(&net, &batch, &batch.target_values, &weights).unwrap();
        opt.step(&first.total.backward().unwrap(), 1e-3).unwrap();
        let loss = unrolled_loss_with(&net, &batch, &batch.target_values, &weights).unwrap();
        let grads = loss.total.backward().unwrap();
        let mut missing = Vec::new();
        for (name, var) in net.params().named() {
            let norm = grads
                .get(var.as_tensor())
                .map(|g| {
                    g.sqr()
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .to_scalar::<f32>()
                        .unwrap()
                })
                .unwrap_or(0.0);
            if norm <= 0.0 || !norm.is_finite() {
                missing.push(name.clone());
            }
        }
        assert!(
            missing.is_empty(),
            "parameters without gradient: {missing:?}"
        );
        assert!(net.params().names().len() > 20);
    }

    #[test]
    fn loss_falls_on_a_fixed_batch() {
        loss_falls_in(spec(), DType::F32);
    }

    #[test]
    fn loss_falls_on_a_fixed_batch_in_bf16() {
        loss_falls_in(spec(), DType::BF16);
    }

    fn loss_falls_in(spec: NetworkSpec, dtype: DType) {
        let net = MuZeroNetwork::new(spec, 4, &Device::Cpu, dtype).unwrap();
        let replay = buffer(5);
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let batch = replay.sample(32, &mut rng).unwrap();
        let mut opt = adamw(&net, 3e-3, 10.0);
        let first = unrolled_loss(&net, &batch, &batch.target_values, 1.0).unwrap();
        let initial = first.total.to_scalar::<f32>().unwrap();
        let first_values = first.read(&net, &[]).unwrap();
        let (init_v, init_r, init_p) =
            (first_values.value, first_values.reward, first_values.policy);
        let mut last = None;
        for _ in 0..150 {
            let loss = unrolled_loss(&net, &batch, &batch.target_values, 1.0).unwrap();
            let grads = loss.total.backward().unwrap();
            opt.step(&grads, 3e-3).unwrap();
            last = Some(loss);
        }
        let last = last.unwrap();
        let fin = last.total.to_scalar::<f32>().unwrap();
        assert!(fin < 0.5 * initial, "loss {initial} -> {fin}");
        let last_values = last.read(&net, &[]).unwrap();
        assert!((last_values.total - fin).abs() < 1e-6);
        assert!(
            last_values.value < init_v
                && last_values.reward < init_r
                && last_values.policy < init_p
        );
        assert_eq!(last_values.priorities.len(), 32);
        // Parameters (and so the optimizer's updates) stay f32 whatever the compute dtype.
        assert!(net.params().vars().iter().all(|v| v.dtype() == DType::F32));
    }

    #[test]
    fn bf16_compute_keeps_f32_parameters_and_is_close_to_f32() {
        let net = MuZeroNetwork::new(spec(), 7, &Device::Cpu, DType::F32).unwrap();
        let tensors = net.params().to_tensors().unwrap();
        let half = MuZeroNetwork::from_tensors(spec(), tensors, &Device::Cpu, DType::BF16).unwrap();
        let replay = buffer(8);
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let batch = replay.sample(16, &mut rng).unwrap();
        let full = unrolled_loss(&net, &batch, &batch.target_values, 1.0).unwrap();
        let low = unrolled_loss(&half, &batch, &batch.target_values, 1.0).unwrap();
        let (a, b) = (
            full.total.to_scalar::<f32>().unwrap(),
            low.total.to_scalar::<f32>().unwrap(),
        );
        assert!(
            (a - b).abs() / a.abs() < 0.05,
            "f32 loss {a} vs bf16 loss {b}"
        );
        assert_eq!(low.total.dtype(), DType::F32);
        let grads = low.total.backward().unwrap();
        for (_, var) in half.params().named() {
            assert_eq!(var.dtype(), DType::F32);
            if let Some(g) = grads.get(var.as_tensor()) {
                assert_eq!(g.dtype(), DType::F32);
            }
        }
    }
}
