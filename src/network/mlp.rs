//! Representation, dynamics and prediction networks for vector observations (MLP trunks with
//! residual blocks and layer normalisation).

use candle_core::Tensor;

use super::layers::{min_max_scale, Head, Linear, Trunk};
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
    reward: Head,
    /// Inference copies: `latent_out` and the reward head's hidden layer as one layer (they
    /// read the same input), and the trunk's first bias folded into its action rows.
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
        let reward = Head::new(
            pb,
            "reward",
            spec.reward_head_input_dim(),
            spec.hidden_dim,
            spec.reward_support.size(),
        );
        pb.pop();
        let (mut trunk, latent_out, reward) = (trunk?, latent_out?, reward?);
        let fused = if pb.is_frozen() {
            trunk.fold_input_bias_into_rows(spec.latent_dim)?;
            // With a value prefix the reward head reads the LSTM, not the trunk.
            (spec.value_prefix_dim == 0)
                .then(|| Linear::concat_outputs(&latent_out, &reward.hidden))
                .transpose()?
        } else {
            None
        };
        Ok(Self {
            trunk,
            latent_out,
            reward,
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
        if let Some(fused) = &self.fused {
            let x = Tensor::cat(&[latent, action_one_hot], 1)?;
            let both = fused.forward(&self.trunk.forward(&x)?)?;
            let latent_dim = latent.dim(1)?;
            let hidden = both.dim(1)? - latent_dim;
            let next = min_max_scale(&both.narrow(1, 0, latent_dim)?)?;
            let reward = self
                .reward
                .out
                .forward(&both.narrow(1, latent_dim, hidden)?.relu()?)?;
            return Ok((next, reward));
        }
        let (next, h) = self.features(latent, action_one_hot)?;
        Ok((next, self.reward.forward(&h)?))
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
        self.reward.forward(x)
    }
}

/// f(latent) -> (policy logits, value logits).
#[derive(Clone, Debug)]
pub struct Prediction {
    trunk: Trunk,
    policy_out: Linear,
    value: Head,
    /// Inference copies: `policy_out` and the value head's hidden layer as one layer (same
    /// input).
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
        let value = Head::new(
            pb,
            "value",
            spec.hidden_dim,
            spec.hidden_dim,
            spec.value_support.size(),
        );
        pb.pop();
        let (policy_out, value) = (policy_out?, value?);
        let fused = if pb.is_frozen() {
            Some(Linear::concat_outputs(&policy_out, &value.hidden)?)
        } else {
            None
        };
        Ok(Self {
            trunk: trunk?,
            policy_out,
            value,
            fused,
        })
    }

    /// # Shapes
    /// `latent`: `[B, latent_dim]` -> (policy logits `[B, A]`, value logits `[B, value_support]`).
    pub fn forward(&self, latent: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let h = self.trunk.forward(latent)?;
        if let Some(fused) = &self.fused {
            let both = fused.forward(&h)?;
            let hidden = self.value.hidden.outputs();
            let actions = both.dim(1)? - hidden;
            let policy = both.narrow(1, 0, actions)?;
            let value = self
                .value
                .out
                .forward(&both.narrow(1, actions, hidden)?.relu()?)?;
            return Ok((policy, value));
        }
        Ok((self.policy_out.forward(&h)?, self.value.forward(&h)?))
    }
}
