//! MuZero's K-step unrolled loss (Schrittwieser et al. 2020, appendix G).
//!
//! For k = 0..=K: value cross-entropy and reward cross-entropy (k >= 1) against two-hot targets
//! on the categorical supports, and policy cross-entropy against the search policy. The
//! gradient entering the dynamics is scaled by 1/2, the losses of steps k >= 1 by 1/K, and each
//! sample by its importance weight. Reduced in f32.

use candle_core::{DType, Tensor, D};

use crate::network::layers::scale_gradient;
use crate::network::{MuZeroNetwork, NetworkError};
use crate::replay::Batch;

/// The loss of one batch: the tensor to differentiate and its parts as numbers.
pub struct LossOutput {
    /// Scalar f32 tensor (weighted mean over the batch).
    pub total: Tensor,
    /// Unweighted per-head means over the batch (summed over unroll steps, 1/K for k >= 1).
    pub value: f32,
    pub reward: f32,
    pub policy: f32,
    /// New priorities: |predicted value at k = 0 - value target at k = 0|, `[B]`.
    pub priorities: Vec<f32>,
}

/// Compute the unrolled loss of `batch` with `target_values` (`[B * (K+1)]`, the batch's own
/// targets or ones re-bootstrapped with a target network).
pub fn unrolled_loss(
    network: &MuZeroNetwork,
    batch: &Batch,
    target_values: &[f32],
    value_loss_weight: f64,
) -> Result<LossOutput, NetworkError> {
    let spec = network.spec();
    let device = network.device();
    let b = batch.batch_size;
    let k_steps = batch.num_unroll_steps;
    let a = batch.num_actions;
    let steps = k_steps + 1;

    // Host-side targets in [B, K+1, ...] layout.
    let value_probs = spec.value_support.scalars_to_probs(target_values);
    let reward_probs = spec.reward_support.scalars_to_probs(&batch.target_rewards);
    let vs = spec.value_support.size();
    let rs = spec.reward_support.size();
    let value_targets = Tensor::from_vec(value_probs, (b, steps, vs), device)?;
    let reward_targets = Tensor::from_vec(reward_probs, (b, steps, rs), device)?;
    let policy_targets = Tensor::from_slice(&batch.target_policies, (b, steps, a), device)?;
    let value_mask = Tensor::from_slice(&batch.value_mask, (b, steps), device)?;
    let policy_mask = Tensor::from_slice(&batch.policy_mask, (b, steps), device)?;
    let weights = Tensor::from_slice(&batch.weights, b, device)?;

    let observations = network.observation_tensor(&batch.observations)?;
    let mut latent = network.represent(&observations)?;
    let (mut policy_logits, mut value_logits) = network.predict(&latent)?;
    let first_values = spec
        .value_support
        .logits_to_scalars(&value_logits.flatten_all()?.to_vec1::<f32>()?);

    let cross_entropy = |logits: &Tensor, targets: &Tensor| -> candle_core::Result<Tensor> {
        // [B, n] x [B, n] -> [B]
        (candle_nn::ops::log_softmax(logits, D::Minus1)? * targets)?
            .sum(D::Minus1)?
            .neg()
    };

    let mut per_sample = Tensor::zeros(b, DType::F32, device)?;
    let (mut value_sum, mut reward_sum, mut policy_sum) = (0f32, 0f32, 0f32);
    for k in 0..steps {
        let mut reward_ce = None;
        if k > 0 {
            let actions: Vec<usize> = (0..b).map(|i| batch.actions[i * k_steps + k - 1]).collect();
            let one_hot = network.action_tensor(&actions)?;
            latent = scale_gradient(&latent, 0.5)?;
            let (next, reward_logits) = network.dynamics(&latent, &one_hot)?;
            latent = next;
            let (p, v) = network.predict(&latent)?;
            policy_logits = p;
            value_logits = v;
            reward_ce = Some(cross_entropy(
                &reward_logits,
                &reward_targets.narrow(1, k, 1)?.squeeze(1)?,
            )?);
        }
        let vmask = value_mask.narrow(1, k, 1)?.squeeze(1)?;
        let pmask = policy_mask.narrow(1, k, 1)?.squeeze(1)?;
        let value_ce =
            (cross_entropy(&value_logits, &value_targets.narrow(1, k, 1)?.squeeze(1)?)? * &vmask)?;
        let policy_ce =
            (cross_entropy(&policy_logits, &policy_targets.narrow(1, k, 1)?.squeeze(1)?)?
                * &pmask)?;
        let scale = if k == 0 { 1.0 } else { 1.0 / k_steps as f64 };
        let mut step_loss = ((&value_ce * value_loss_weight)? + &policy_ce)?;
        value_sum += value_ce.mean_all()?.to_scalar::<f32>()? * scale as f32;
        policy_sum += policy_ce.mean_all()?.to_scalar::<f32>()? * scale as f32;
        if let Some(r) = reward_ce {
            let r = (r * &vmask)?;
            reward_sum += r.mean_all()?.to_scalar::<f32>()? * scale as f32;
            step_loss = (step_loss + r)?;
        }
        per_sample = (per_sample + (step_loss * scale)?)?;
    }
    let total = (per_sample * weights)?.mean_all()?;
    let priorities = (0..b)
        .map(|i| (first_values[i] - target_values[i * steps]).abs())
        .collect();
    Ok(LossOutput {
        total,
        value: value_sum,
        reward: reward_sum,
        policy: policy_sum,
        priorities,
    })
}
