//! candle networks of MuZero: representation h, dynamics g and prediction f.
//!
//! Parameters are f32 (see [`params`]); the forward pass runs in the compute dtype given at
//! construction (f32, bf16 or f16) and every output head is returned in f32, so losses are
//! reduced in f32. The device arrives with the caller's choice; nothing here picks one.

pub mod conv;
pub mod cost;
#[cfg(feature = "cuda")]
pub mod cuda_graph;
#[cfg(feature = "cuda")]
pub mod cuda_mlp;
mod direct_conv;
pub mod fused;
#[cfg(feature = "cuda")]
mod fused_cuda;
pub mod host_conv;
pub mod host_conv_net;
pub mod host_conv_trunk;
pub mod host_inference;
pub mod host_mlp;
pub mod layers;
pub mod mlp;
pub mod packed_mlp;
pub mod params;
pub mod projection;
mod recycled;
pub mod search_model;
pub mod unfold;
pub mod value_prefix;

/// Whether this CPU runs the search's bf16 convolutions (`mcts.inference_dtype`): AVX-512
/// with its BF16 extension.
pub fn bf16_inference_runs_here() -> bool {
    direct_conv::bf16::runs_here()
}

use std::borrow::Cow;
use std::collections::HashMap;

use crate::config::ModelDtype;
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::support::Support;
pub use params::{ParamBuilder, Params};
pub use search_model::SearchModel;

/// Errors from building or running a network.
#[derive(Debug, Error)]
pub enum NetworkError {
    #[error("candle error")]
    Candle(#[from] candle_core::Error),
    #[error("parameter `{0}` is missing (checkpoint of a different architecture?)")]
    MissingParameter(String),
    #[error(
        "parameter `{0}` is not part of this network (checkpoint of a different architecture?)"
    )]
    UnexpectedParameter(String),
    #[error("parameter `{name}` has shape {got:?}, expected {expected:?} (checkpoint of a different configuration?)")]
    ParameterShape {
        name: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    #[error("observation batch has {got} values, expected a multiple of {per_observation} (observation shape {shape:?})")]
    ObservationShape {
        got: usize,
        per_observation: usize,
        shape: Vec<usize>,
    },
    #[error("a batch of {batch} does not split evenly over {replicas} replicas (make training.batch_size a multiple of the device count)")]
    BatchSplit { batch: usize, replicas: usize },
    #[error("action {action} is out of range for {num_actions} actions")]
    ActionOutOfRange { action: usize, num_actions: usize },
    #[error("exchange with the other ranks failed")]
    Collective(#[from] crate::distributed::CollectiveError),
}

fn one() -> usize {
    1
}

fn two() -> usize {
    2
}

/// Everything that fixes a network's architecture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkSpec {
    pub observation_shape: Vec<usize>,
    pub num_actions: usize,
    pub hidden_dim: usize,
    pub latent_dim: usize,
    pub num_blocks: usize,
    /// Channels of the conv trunks (used when observations are `[C, H, W]`).
    pub conv_channels: usize,
    /// Planes of the conv net's 1 x 1 convolutions in front of the value, policy and reward
    /// heads (AlphaZero's 1, 2 and 1 in checkpoints written before they were choices).
    #[serde(default = "one")]
    pub value_head_channels: usize,
    #[serde(default = "two")]
    pub policy_head_channels: usize,
    #[serde(default = "one")]
    pub reward_head_channels: usize,
    /// Use the MLP even for `[C, H, W]` observations (flattened).
    #[serde(default)]
    pub force_mlp: bool,
    pub value_support: Support,
    pub reward_support: Support,
    /// Width of EfficientZero's projection and prediction heads for the consistency loss (0:
    /// no heads; see [`projection`]).
    #[serde(default)]
    pub projection_dim: usize,
    /// Fixed multipliers of the observation's values at the network's input (empty: none;
    /// else one per value). Part of the network, so every caller passes raw observations.
    #[serde(default)]
    pub observation_scale: Vec<f32>,
    /// Width of the value prefix's LSTM (0: the dynamics predicts each transition's reward;
    /// see [`value_prefix`]).
    #[serde(default)]
    pub value_prefix_dim: usize,
    /// Depths at which the value prefix resets (0: only at the root; see
    /// [`value_prefix::is_reset`]).
    #[serde(default)]
    pub value_prefix_horizon: usize,
    /// Conv networks: where each action acts on the board, `[A, H, W]` (1 on the action's
    /// cells, 0 elsewhere; `Environment::action_planes`): the dynamics reads action `a` as
    /// plane `a` of these and zeros elsewhere. Empty: as constant planes (all ones).
    #[serde(default)]
    pub action_planes: Vec<f32>,
}

impl NetworkSpec {
    /// Values per observation.
    pub fn obs_len(&self) -> usize {
        self.observation_shape.iter().product()
    }

    /// Image-like observations `[C, H, W]` get the conv ResNet (unless `force_mlp`); everything
    /// else is flattened into the MLP.
    pub fn uses_conv(&self) -> bool {
        self.observation_shape.len() == 3 && !self.force_mlp
    }

    /// Shape of one latent state: `[latent_dim]` (MLP) or `[conv_channels, H, W]` (conv).
    pub fn latent_shape(&self) -> Vec<usize> {
        if self.uses_conv() {
            vec![
                self.conv_channels,
                self.observation_shape[1],
                self.observation_shape[2],
            ]
        } else {
            vec![self.latent_dim]
        }
    }

    /// `observations` (`[B * obs_len]`) times [`Self::observation_scale`], or as they are.
    pub fn scale_observations<'o>(&self, observations: &'o [f32]) -> Cow<'o, [f32]> {
        scale_observations(&self.observation_scale, observations)
    }

    /// Width of the dynamics' reward features, what the reward head (or, with a value prefix,
    /// its LSTM) reads: the trunk's output for the MLP, the flattened reward planes
    /// (`reward_head_channels x H x W`) for the conv net.
    pub fn reward_features_dim(&self) -> usize {
        if self.uses_conv() {
            self.reward_head_channels * self.observation_shape[1] * self.observation_shape[2]
        } else {
            self.hidden_dim
        }
    }

    /// Width of the reward head's input: the LSTM's output with a value prefix, else the
    /// reward features.
    pub fn reward_head_input_dim(&self) -> usize {
        if self.value_prefix_dim > 0 {
            self.value_prefix_dim
        } else {
            self.reward_features_dim()
        }
    }
}

/// `observations` (`[B * obs_len]`) times `scale` (one multiplier per value of an
/// observation), or as they are when `scale` is empty.
pub fn scale_observations<'o>(scale: &[f32], observations: &'o [f32]) -> Cow<'o, [f32]> {
    if scale.is_empty() {
        return Cow::Borrowed(observations);
    }
    Cow::Owned(
        observations
            .iter()
            .zip(scale.iter().cycle())
            .map(|(x, s)| x * s)
            .collect(),
    )
}

/// The three networks, in the architecture the observations call for.
#[derive(Clone)]
enum Architecture {
    Mlp {
        representation: mlp::Representation,
        dynamics: mlp::Dynamics,
        prediction: mlp::Prediction,
    },
    Conv {
        representation: conv::ConvRepresentation,
        dynamics: conv::ConvDynamics,
        prediction: conv::ConvPrediction,
    },
}

/// Parse a configured compute dtype (`auto` resolves by device: bf16 on CUDA, f32 on the CPU,
/// where candle's bf16 matmul is emulated and slower).
pub fn compute_dtype(dtype: ModelDtype, device: &Device) -> DType {
    match dtype {
        ModelDtype::Bfloat16 => DType::BF16,
        ModelDtype::Float16 => DType::F16,
        ModelDtype::Float32 => DType::F32,
        ModelDtype::Auto if device.is_cuda() => DType::BF16,
        ModelDtype::Auto => DType::F32,
    }
}

/// The three MuZero networks with their parameters.
#[derive(Clone)]
pub struct MuZeroNetwork {
    spec: NetworkSpec,
    params: Params,
    dtype: DType,
    architecture: Architecture,
    projection: Option<projection::Projection>,
    value_prefix: Option<value_prefix::ValuePrefixLstm>,
}

impl MuZeroNetwork {
    /// Fresh parameters from `seed`.
    pub fn new(
        spec: NetworkSpec,
        seed: u64,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, NetworkError> {
        Self::build(spec, ParamBuilder::random(seed, device), dtype)
    }

    /// Parameters from named tensors (a checkpoint); names and shapes must match exactly.
    pub fn from_tensors(
        spec: NetworkSpec,
        tensors: HashMap<String, Tensor>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, NetworkError> {
        Self::build(spec, ParamBuilder::from_tensors(tensors, device), dtype)
    }

    fn build(spec: NetworkSpec, mut pb: ParamBuilder, dtype: DType) -> Result<Self, NetworkError> {
        let architecture = if spec.uses_conv() {
            Architecture::Conv {
                representation: conv::ConvRepresentation::new(&mut pb, &spec)?,
                dynamics: conv::ConvDynamics::new(&mut pb, &spec)?,
                prediction: conv::ConvPrediction::new(&mut pb, &spec)?,
            }
        } else {
            Architecture::Mlp {
                representation: mlp::Representation::new(&mut pb, &spec)?,
                dynamics: mlp::Dynamics::new(&mut pb, &spec)?,
                prediction: mlp::Prediction::new(&mut pb, &spec)?,
            }
        };
        // Built last, so a network without the heads draws the same initial weights.
        let projection = if spec.projection_dim > 0 {
            Some(projection::Projection::new(&mut pb, &spec)?)
        } else {
            None
        };
        let value_prefix = if spec.value_prefix_dim > 0 {
            Some(value_prefix::ValuePrefixLstm::new(&mut pb, &spec)?)
        } else {
            None
        };
        Ok(Self {
            spec,
            params: pb.finish()?,
            dtype,
            architecture,
            projection,
            value_prefix,
        })
    }

    /// The same network for inference only: weights detached (no autograd graph is recorded)
    /// and cast to the compute dtype once, so layer norms take candle's fused kernel and no
    /// call re-casts a weight. Cheap (no copy in f32); what the search runs on.
    pub fn inference_copy(&self) -> Result<Self, NetworkError> {
        Self::build(
            self.spec.clone(),
            ParamBuilder::frozen(&self.params, self.dtype),
            self.dtype,
        )
    }

    /// The network for one training step in a compute dtype other than f32 (bf16 on CUDA):
    /// every weight cast once, with the cast recorded so gradients reach the f32 parameters,
    /// instead of once per layer call and unroll step. In f32 the network itself serves.
    pub fn training_view(&self) -> Result<Self, NetworkError> {
        if self.dtype == DType::F32 {
            return Ok(self.clone());
        }
        Self::build(
            self.spec.clone(),
            ParamBuilder::cast(&self.params, self.dtype),
            self.dtype,
        )
    }

    /// An independent copy (new parameter storage) on `device`, e.g. a target network or a replica.
    pub fn deep_copy(&self, device: &Device) -> Result<Self, NetworkError> {
        let tensors = self.params.to_tensors()?;
        Self::from_tensors(self.spec.clone(), tensors, device, self.dtype)
    }

    pub fn spec(&self) -> &NetworkSpec {
        &self.spec
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn device(&self) -> &Device {
        self.params.device()
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Observations as a tensor in the compute dtype.
    ///
    /// # Shapes
    /// `observations`: `[B * obs_len]` -> `[B, obs_len]`, or `[B, C, H, W]` for the conv net.
    pub fn observation_tensor(&self, observations: &[f32]) -> Result<Tensor, NetworkError> {
        let per = self.spec.obs_len();
        if per == 0 || !observations.len().is_multiple_of(per) {
            return Err(NetworkError::ObservationShape {
                got: observations.len(),
                per_observation: per,
                shape: self.spec.observation_shape.clone(),
            });
        }
        let b = observations.len() / per;
        let mut shape = vec![b];
        if self.spec.uses_conv() {
            shape.extend(&self.spec.observation_shape);
        } else {
            shape.push(per);
        }
        let scaled = self.spec.scale_observations(observations);
        Ok(Tensor::from_slice(&scaled, shape, self.device())?.to_dtype(self.dtype)?)
    }

    /// `action` if this network has it, else [`NetworkError::ActionOutOfRange`].
    pub fn checked_action(&self, action: usize) -> Result<usize, NetworkError> {
        if action < self.spec.num_actions {
            Ok(action)
        } else {
            Err(NetworkError::ActionOutOfRange {
                action,
                num_actions: self.spec.num_actions,
            })
        }
    }

    /// One-hot actions in the compute dtype, `[B, A]`.
    pub fn action_tensor(&self, actions: &[usize]) -> Result<Tensor, NetworkError> {
        let a = self.spec.num_actions;
        let mut one_hot = vec![0f32; actions.len() * a];
        for (i, &action) in actions.iter().enumerate() {
            one_hot[i * a + self.checked_action(action)?] = 1.0;
        }
        Ok(Tensor::from_vec(one_hot, (actions.len(), a), self.device())?.to_dtype(self.dtype)?)
    }

    /// h: observations -> latent `[B, ...latent_shape]`.
    pub fn represent(&self, observations: &Tensor) -> Result<Tensor, NetworkError> {
        Ok(match &self.architecture {
            Architecture::Mlp { representation, .. } => representation.forward(observations)?,
            Architecture::Conv { representation, .. } => representation.forward(observations)?,
        })
    }

    /// g: (latent `[B, ...]`, one-hot actions `[B, A]`) -> (latent `[B, ...]`, reward logits
    /// `[B, R]` f32). With a value prefix, the logits are the prefix of a first step from a
    /// reset point, which is that step's reward.
    pub fn dynamics(
        &self,
        latent: &Tensor,
        actions: &Tensor,
    ) -> Result<(Tensor, Tensor), NetworkError> {
        let (next, reward, _) = self.dynamics_step(latent, actions, None)?;
        Ok((next, reward))
    }

    /// g with the value prefix's state: from `state` (`None`: a reset point, zeros) ->
    /// (latent, reward or prefix logits `[B, R]` f32, the state after the step). Without a
    /// value prefix the state is ignored and `None` comes back: this is [`Self::dynamics`].
    pub fn dynamics_step(
        &self,
        latent: &Tensor,
        actions: &Tensor,
        state: Option<&value_prefix::PrefixState>,
    ) -> Result<(Tensor, Tensor, Option<value_prefix::PrefixState>), NetworkError> {
        let Some(lstm) = &self.value_prefix else {
            let (next, reward) = match &self.architecture {
                Architecture::Mlp { dynamics, .. } => dynamics.forward(latent, actions)?,
                Architecture::Conv { dynamics, .. } => dynamics.forward(latent, actions)?,
            };
            return Ok((next, reward.to_dtype(DType::F32)?, None));
        };
        let (next, features) = match &self.architecture {
            Architecture::Mlp { dynamics, .. } => dynamics.features(latent, actions)?,
            Architecture::Conv { dynamics, .. } => dynamics.features(latent, actions)?,
        };
        let zeros;
        let state = match state {
            Some(state) => state,
            None => {
                zeros = value_prefix::PrefixState::zeros(
                    features.dim(0)?,
                    lstm.dim(),
                    features.dtype(),
                    features.device(),
                )?;
                &zeros
            }
        };
        let (out, state) = lstm.step(&features, state)?;
        let logits = match &self.architecture {
            Architecture::Mlp { dynamics, .. } => dynamics.reward_head(&out)?,
            Architecture::Conv { dynamics, .. } => dynamics.reward_head(&out)?,
        };
        Ok((next, logits.to_dtype(DType::F32)?, Some(state)))
    }

    /// Whether the dynamics predicts value prefixes (see [`value_prefix`]) rather than rewards.
    pub fn has_value_prefix(&self) -> bool {
        self.value_prefix.is_some()
    }

    /// Scalar values of observations: h, then f's value head, off the categorical support.
    ///
    /// # Shapes
    /// `observations`: `[B * obs_len]` -> `[B]`.
    pub fn values(&self, observations: &[f32]) -> Result<Vec<f32>, NetworkError> {
        let latent = self.represent(&self.observation_tensor(observations)?)?;
        let (_, value_logits) = self.predict(&latent)?;
        let logits = crate::op_count::read_f32(&value_logits)?;
        Ok(self.spec.value_support.logits_to_scalars(&logits))
    }

    /// The consistency loss's projection of a latent `[B, ...]` -> `[B, projection_dim]` f32,
    /// through the predictor head too when `predict`; `None` without projection heads.
    pub fn project(&self, latent: &Tensor, predict: bool) -> Result<Option<Tensor>, NetworkError> {
        match &self.projection {
            Some(p) => Ok(Some(p.forward(latent, predict)?)),
            None => Ok(None),
        }
    }

    /// f: latent `[B, ...]` -> (policy logits `[B, A]` f32, value logits `[B, V]` f32).
    pub fn predict(&self, latent: &Tensor) -> Result<(Tensor, Tensor), NetworkError> {
        let (policy, value) = match &self.architecture {
            Architecture::Mlp { prediction, .. } => prediction.forward(latent)?,
            Architecture::Conv { prediction, .. } => prediction.forward(latent)?,
        };
        Ok((policy.to_dtype(DType::F32)?, value.to_dtype(DType::F32)?))
    }
}
