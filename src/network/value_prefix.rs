//! EfficientZero's value prefix (Ye et al. 2021): instead of the reward of each transition,
//! the dynamics predicts the sum of the rewards since the last reset, through an LSTM that
//! runs along the unroll (or down a search path). Knowing *that* a reward comes within a few
//! steps is easier than knowing on *which* step it comes; the search recovers each
//! transition's reward as the difference of two prefixes.
//!
//! Present when `NetworkSpec::value_prefix_dim > 0`. The LSTM reads the dynamics' reward
//! features (the trunk's output for the MLP, the reward plane for the conv net) and the
//! reward head reads the LSTM's output instead of the features.
//!
//! # Resets
//! A node at depth `d` (dynamics steps from the root of a search or the start of an unroll)
//! is a *reset point* when `d == 0` or `d` is a multiple of the horizon. A child of a reset
//! point starts its LSTM from zeros and its prefix counts from 0; any other child continues
//! its parent's state and prefix. [`is_reset`] is the one rule; the targets
//! ([`crate::replay::Batch::value_prefix_targets`]), the loss and the search all follow it.

use candle_core::{DType, Device, Tensor};

use super::layers::Linear;
use super::params::ParamBuilder;
use super::{NetworkError, NetworkSpec};

pub use crate::replay::value_prefix::is_reset;

/// The LSTM's state for a batch: hidden `h` and cell `c`, each `[B, value_prefix_dim]` in the
/// compute dtype.
#[derive(Clone, Debug)]
pub struct PrefixState {
    pub h: Tensor,
    pub c: Tensor,
}

impl PrefixState {
    /// The state at a reset point: zeros, `h` and `c` in storages of their own (the search
    /// writes into them in place).
    pub fn zeros(
        batch: usize,
        dim: usize,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Self> {
        Ok(Self {
            h: Tensor::zeros((batch, dim), dtype, device)?,
            c: Tensor::zeros((batch, dim), dtype, device)?,
        })
    }
}

/// One LSTM cell: gates `x W_x^T + b_x + h W_h^T + b_h`, split into input, forget, cell and
/// output gates (in that order, as PyTorch's `nn.LSTM`).
#[derive(Clone, Debug)]
pub struct ValuePrefixLstm {
    input: Linear,
    hidden: Linear,
    dim: usize,
}

impl ValuePrefixLstm {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        let dim = spec.value_prefix_dim;
        pb.push("value_prefix");
        let input = Linear::new(pb, "input", spec.reward_features_dim(), 4 * dim, false);
        let hidden = Linear::new(pb, "hidden", dim, 4 * dim, false);
        pb.pop();
        Ok(Self {
            input: input?,
            hidden: hidden?,
            dim,
        })
    }

    /// Width of the state and of the output.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// One step: `features` `[B, reward_features_dim]` and the state before it -> the output
    /// `[B, dim]` (the new `h`) and the new state, in `features`' dtype.
    pub fn step(
        &self,
        features: &Tensor,
        state: &PrefixState,
    ) -> candle_core::Result<(Tensor, PrefixState)> {
        let gates = (self.input.forward(features)? + self.hidden.forward(&state.h)?)?;
        let d = self.dim;
        let gate = |i: usize| gates.narrow(1, i * d, d);
        let input = sigmoid(&gate(0)?)?;
        let forget = sigmoid(&gate(1)?)?;
        let cell = gate(2)?.tanh()?;
        let output = sigmoid(&gate(3)?)?;
        let c = ((forget * &state.c)? + (input * cell)?)?;
        let h = (output * c.tanh()?)?;
        Ok((h.clone(), PrefixState { h, c }))
    }
}

/// `1 / (1 + e^-x)` as `(tanh(x / 2) + 1) / 2`: ops with a backward pass in every dtype.
fn sigmoid(x: &Tensor) -> candle_core::Result<Tensor> {
    ((x * 0.5)?.tanh()? + 1.0)? * 0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sigmoid_matches_its_definition() {
        let xs = [-6.0f32, -1.0, 0.0, 0.3, 4.0];
        let t = Tensor::new(&xs, &Device::Cpu).unwrap();
        let got = sigmoid(&t).unwrap().to_vec1::<f32>().unwrap();
        for (x, y) in xs.iter().zip(got) {
            assert!((y - 1.0 / (1.0 + (-x).exp())).abs() < 1e-6, "{x}: {y}");
        }
    }
}
