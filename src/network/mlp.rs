//! Representation, dynamics and prediction networks for vector observations (MLP trunks with
//! residual blocks and layer normalisation).

use candle_core::Tensor;

use super::fused::relu;
use super::layers::{min_max_scale, Linear, Trunk};
use super::params::ParamBuilder;
use super::{NetworkError, NetworkSpec};

/// h(obs) -> latent.
#[derive(Clone, Debug)]
pub struct Representation {
    trunk: Trunk,
    out: Linear,
}

impl Representation {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        pb.push("representation");
        let trunk = Trunk::new(
            pb,
            "trunk",
            spec.obs_len(),
            spec.hidden_dim,
            spec.num_blocks,
        );
        let out = Linear::new(pb, "out", spec.hidden_dim, spec.latent_dim, false);
        pb.pop();
        Ok(Self {
            trunk: trunk?,
            out: out?,
        })
    }

    /// # Shapes
    /// `obs`: `[B, obs_len]` -> latent `[B, latent_dim]` in [0, 1].
    pub fn forward(&self, obs: &Tensor) -> candle_core::Result<Tensor> {
        min_max_scale(&self.out.forward(&self.trunk.forward(obs)?)?)
    }
}

/// g(latent, action) -> (latent', reward logits).
#[derive(Clone, Debug)]
pub struct Dynamics {
    trunk: Trunk,
    latent_out: Linear,
    reward_hidden: Linear,
    reward_out: Linear,
    /// Inference copies: `latent_out` and `reward_hidden` as one layer (they read the same
    /// input), and the trunk's first bias folded into its action rows.
    fused: Option<Linear>,
}

impl Dynamics {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        pb.push("dynamics");
        let trunk = Trunk::new(
            pb,
            "trunk",
            spec.latent_dim + spec.num_actions,
            spec.hidden_dim,
            spec.num_blocks,
        );
        let latent_out = Linear::new(pb, "latent_out", spec.hidden_dim, spec.latent_dim, false);
        let reward_hidden = Linear::new(
            pb,
            "reward_hidden",
            spec.reward_head_input_dim(),
            spec.hidden_dim,
            false,
        );
        let reward_out = Linear::new(
            pb,
            "reward_out",
            spec.hidden_dim,
            spec.reward_support.size(),
            true,
        );
        pb.pop();
        let (mut trunk, latent_out, reward_hidden) = (trunk?, latent_out?, reward_hidden?);
        let fused = if pb.is_frozen() {
            trunk.fold_input_bias_into_rows(spec.latent_dim)?;
            // With a value prefix the reward head reads the LSTM, not the trunk.
            (spec.value_prefix_dim == 0)
                .then(|| Linear::concat_outputs(&latent_out, &reward_hidden))
                .transpose()?
        } else {
            None
        };
        Ok(Self {
            trunk,
            latent_out,
            reward_hidden,
            reward_out: reward_out?,
            fused,
        })
    }

    /// # Shapes
    /// `latent`: `[B, latent_dim]`, `action_one_hot`: `[B, A]` (latent's dtype)
    /// -> (`[B, latent_dim]`, reward logits `[B, reward_support]`).
    pub fn forward(
        &self,
        latent: &Tensor,
        action_one_hot: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let x = Tensor::cat(&[latent, action_one_hot], 1)?;
        let h = self.trunk.forward(&x)?;
        if let Some(fused) = &self.fused {
            let both = fused.forward(&h)?;
            let latent_dim = latent.dim(1)?;
            let hidden = both.dim(1)? - latent_dim;
            let next = min_max_scale(&both.narrow(1, 0, latent_dim)?)?;
            let reward = self
                .reward_out
                .forward(&both.narrow(1, latent_dim, hidden)?.relu()?)?;
            return Ok((next, reward));
        }
        let next = min_max_scale(&self.latent_out.forward(&h)?)?;
        Ok((next, self.reward_head(&h)?))
    }

    /// The latent and the reward features (the trunk's output `[B, hidden_dim]`), without the
    /// reward head: what a value prefix's LSTM reads.
    pub fn features(
        &self,
        latent: &Tensor,
        action_one_hot: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let h = self
            .trunk
            .forward(&Tensor::cat(&[latent, action_one_hot], 1)?)?;
        Ok((min_max_scale(&self.latent_out.forward(&h)?)?, h))
    }

    /// Reward (or value prefix) logits of `[B, reward_head_input_dim]` features.
    pub fn reward_head(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.reward_out
            .forward(&relu(&self.reward_hidden.forward(x)?)?)
    }
}

/// f(latent) -> (policy logits, value logits).
#[derive(Clone, Debug)]
pub struct Prediction {
    trunk: Trunk,
    policy_out: Linear,
    value_hidden: Linear,
    value_out: Linear,
    /// Inference copies: `policy_out` and `value_hidden` as one layer (same input).
    fused: Option<Linear>,
}

impl Prediction {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        pb.push("prediction");
        let trunk = Trunk::new(
            pb,
            "trunk",
            spec.latent_dim,
            spec.hidden_dim,
            spec.num_blocks,
        );
        let policy_out = Linear::new(pb, "policy_out", spec.hidden_dim, spec.num_actions, false);
        let value_hidden = Linear::new(pb, "value_hidden", spec.hidden_dim, spec.hidden_dim, false);
        let value_out = Linear::new(
            pb,
            "value_out",
            spec.hidden_dim,
            spec.value_support.size(),
            true,
        );
        pb.pop();
        let (policy_out, value_hidden) = (policy_out?, value_hidden?);
        let fused = if pb.is_frozen() {
            Some(Linear::concat_outputs(&policy_out, &value_hidden)?)
        } else {
            None
        };
        Ok(Self {
            trunk: trunk?,
            policy_out,
            value_hidden,
            value_out: value_out?,
            fused,
        })
    }

    /// # Shapes
    /// `latent`: `[B, latent_dim]` -> (policy logits `[B, A]`, value logits `[B, value_support]`).
    pub fn forward(&self, latent: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let h = self.trunk.forward(latent)?;
        if let Some(fused) = &self.fused {
            let both = fused.forward(&h)?;
            let actions = both.dim(1)? - self.value_hidden.outputs();
            let policy = both.narrow(1, 0, actions)?;
            let value = self.value_out.forward(
                &both
                    .narrow(1, actions, self.value_hidden.outputs())?
                    .relu()?,
            )?;
            return Ok((policy, value));
        }
        let policy = self.policy_out.forward(&h)?;
        let value = self
            .value_out
            .forward(&relu(&self.value_hidden.forward(&h)?)?)?;
        Ok((policy, value))
    }
}
