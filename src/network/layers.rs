//! Small layers that keep f32 weights and compute in the input's dtype.
//!
//! candle's stock `Linear` fails on bf16 input with f32 weights, and its fused `layer_norm`
//! has no backward (see docs/dependencies.md), so these use `fused`'s kernels (f32 on the
//! CPU) or ops that have both.

use candle_core::{DType, Tensor, D};

use super::fused::{self, add_bias};
use super::params::ParamBuilder;
use super::NetworkError;

/// Cast `t` to `dtype` unless it already is (casting is not free).
pub fn cast(t: &Tensor, dtype: DType) -> candle_core::Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t.clone())
    } else {
        t.to_dtype(dtype)
    }
}

/// y = x W^T + b with W `[out, in]` and b `[out]` stored in f32.
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Tensor,
    /// `W^T`, contiguous, in an inference copy (one op less per call).
    weight_t: Option<Tensor>,
    /// Inference copy only: the bias is already inside `weight_t` (see
    /// [`Linear::fold_bias_into_rows`]), so no bias is added.
    bias_folded: bool,
}

impl Linear {
    /// PyTorch's default initialisation: uniform(+-1/sqrt(in)) for weight and bias; `zero`
    /// makes both zero (used for the last layer of the value/reward heads).
    pub fn new(
        pb: &mut ParamBuilder,
        name: &str,
        input: usize,
        output: usize,
        zero: bool,
    ) -> Result<Self, NetworkError> {
        let bound = if zero {
            0.0
        } else {
            1.0 / (input as f32).sqrt()
        };
        pb.push(name);
        let weight = pb.uniform("weight", &[output, input], bound);
        let bias = pb.uniform("bias", &[output], bound);
        pb.pop();
        let weight = weight?;
        let weight_t = if pb.is_frozen() {
            Some(weight.t()?.contiguous()?)
        } else {
            None
        };
        Ok(Self {
            weight,
            bias: bias?,
            weight_t,
            bias_folded: false,
        })
    }

    /// Output width.
    pub fn outputs(&self) -> usize {
        self.bias.dims()[0]
    }

    /// Inference copies only: one layer computing `a` and `b` side by side (their outputs
    /// concatenated), one matrix product instead of two for inputs they share.
    pub fn concat_outputs(a: &Linear, b: &Linear) -> candle_core::Result<Linear> {
        let (Some(wa), Some(wb)) = (&a.weight_t, &b.weight_t) else {
            candle_core::bail!("Linear::concat_outputs needs inference copies");
        };
        Ok(Linear {
            weight: Tensor::cat(&[&a.weight, &b.weight], 0)?,
            bias: Tensor::cat(&[&a.bias, &b.bias], 0)?,
            weight_t: Some(Tensor::cat(&[wa, wb], 1)?),
            bias_folded: false,
        })
    }

    /// Inference copies only, for an input whose columns `start..` are one-hot (exactly one 1
    /// per row, as an action encoding is): adding the bias to each of those rows of `W^T`
    /// gives the same output without a separate bias add.
    pub fn fold_bias_into_rows(&mut self, start: usize) -> candle_core::Result<()> {
        let Some(weight_t) = &self.weight_t else {
            candle_core::bail!("Linear::fold_bias_into_rows needs an inference copy");
        };
        let rows = weight_t.dim(0)?;
        let head = weight_t.narrow(0, 0, start)?;
        let tail = weight_t
            .narrow(0, start, rows - start)?
            .broadcast_add(&self.bias.to_dtype(weight_t.dtype())?.unsqueeze(0)?)?;
        self.weight_t = Some(Tensor::cat(&[&head, &tail], 0)?.contiguous()?);
        self.bias_folded = true;
        Ok(())
    }

    /// # Shapes
    /// `x`: `[B, in]` -> `[B, out]`, in `x`'s dtype.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        if let Some(weight_t) = &self.weight_t {
            let y = x.matmul(&cast(weight_t, dtype)?)?;
            if self.bias_folded {
                return Ok(y);
            }
            return add_bias(&y, &cast(&self.bias, dtype)?);
        }
        let w = cast(&self.weight, dtype)?;
        let b = cast(&self.bias, dtype)?;
        add_bias(&x.matmul(&w.t()?)?, &b)
    }
}

/// An output head, `out(relu(hidden(x)))`, as the value and reward heads are: parameters
/// `{name}_hidden` and `{name}_out`, the last layer starting at zero.
#[derive(Clone, Debug)]
pub struct Head {
    pub hidden: Linear,
    pub out: Linear,
}

impl Head {
    pub fn new(
        pb: &mut ParamBuilder,
        name: &str,
        input: usize,
        hidden: usize,
        output: usize,
    ) -> Result<Self, NetworkError> {
        let first = Linear::new(pb, &format!("{name}_hidden"), input, hidden, false);
        let out = Linear::new(pb, &format!("{name}_out"), hidden, output, true);
        Ok(Self {
            hidden: first?,
            out: out?,
        })
    }

    /// # Shapes
    /// `x`: `[B, input]` -> `[B, output]`, in `x`'s dtype.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.out.forward(&fused::relu(&self.hidden.forward(x)?)?)
    }
}

/// `(x - mean) / sqrt(var + eps)` over the last dimension, in f32 (plain ops, so it has a
/// backward pass; candle's fused layer norm does not).
pub fn standardize(x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    let x = cast(x, DType::F32)?;
    let mean = x.mean_keepdim(D::Minus1)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    centred.broadcast_div(&(var + eps)?.sqrt()?)
}

/// A learned per-feature scale (starting at 1) and shift (starting at 0) of length `dim`.
pub fn scale_and_shift(
    pb: &mut ParamBuilder,
    name: &str,
    dim: usize,
) -> Result<(Tensor, Tensor), NetworkError> {
    pb.push(name);
    let gamma = pb.norm_constant("weight", &[dim], 1.0);
    let beta = pb.norm_constant("bias", &[dim], 0.0);
    pb.pop();
    Ok((gamma?, beta?))
}

/// Layer normalisation over the last dimension, computed in f32 for stability, with a learned
/// scale and shift.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    gamma: Tensor,
    beta: Tensor,
}

impl LayerNorm {
    pub fn new(pb: &mut ParamBuilder, name: &str, dim: usize) -> Result<Self, NetworkError> {
        let (gamma, beta) = scale_and_shift(pb, name, dim)?;
        Ok(Self { gamma, beta })
    }

    /// # Shapes
    /// `x`: `[B, dim]` -> `[B, dim]`, in `x`'s dtype.
    ///
    /// Without gradients to track (an inference copy of the network, see
    /// `MuZeroNetwork::inference_copy`) this is candle's fused layer norm, one op instead of
    /// about fifteen; it accumulates in f32 for every input dtype.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if !x.track_op() && !self.gamma.track_op() && !self.beta.track_op() {
            let gamma = cast(&self.gamma, x.dtype())?;
            let beta = cast(&self.beta, x.dtype())?;
            return candle_nn::ops::layer_norm(&x.contiguous()?, &gamma, &beta, 1e-5);
        }
        fused::layer_norm(x, &self.gamma, &self.beta, 1e-5)
    }
}

/// Linear -> LayerNorm -> ReLU.
#[derive(Clone, Debug)]
pub struct DenseBlock {
    linear: Linear,
    norm: LayerNorm,
}

impl DenseBlock {
    pub fn new(
        pb: &mut ParamBuilder,
        name: &str,
        input: usize,
        output: usize,
    ) -> Result<Self, NetworkError> {
        pb.push(name);
        let linear = Linear::new(pb, "linear", input, output, false);
        let norm = LayerNorm::new(pb, "norm", output);
        pb.pop();
        Ok(Self {
            linear: linear?,
            norm: norm?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        fused::relu(&self.norm.forward(&self.linear.forward(x)?)?)
    }
}

/// Pre-activation-free residual block: x + LN(W2 relu(LN(W1 x))), then ReLU.
#[derive(Clone, Debug)]
pub struct ResidualBlock {
    first: DenseBlock,
    second: Linear,
    norm: LayerNorm,
}

impl ResidualBlock {
    pub fn new(pb: &mut ParamBuilder, name: &str, dim: usize) -> Result<Self, NetworkError> {
        pb.push(name);
        let first = DenseBlock::new(pb, "first", dim, dim);
        let second = Linear::new(pb, "second", dim, dim, false);
        let norm = LayerNorm::new(pb, "norm", dim);
        pb.pop();
        Ok(Self {
            first: first?,
            second: second?,
            norm: norm?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self
            .norm
            .forward(&self.second.forward(&self.first.forward(x)?)?)?;
        fused::relu(&(x + h)?)
    }
}

/// A trunk: DenseBlock(in -> hidden) followed by `num_blocks` residual blocks.
#[derive(Clone, Debug)]
pub struct Trunk {
    input: DenseBlock,
    blocks: Vec<ResidualBlock>,
}

impl Trunk {
    pub fn new(
        pb: &mut ParamBuilder,
        name: &str,
        input: usize,
        hidden: usize,
        num_blocks: usize,
    ) -> Result<Self, NetworkError> {
        pb.push(name);
        let first = DenseBlock::new(pb, "input", input, hidden);
        let blocks: Result<Vec<_>, _> = (0..num_blocks)
            .map(|i| ResidualBlock::new(pb, &format!("block{i}"), hidden))
            .collect();
        pb.pop();
        Ok(Self {
            input: first?,
            blocks: blocks?,
        })
    }

    /// The first layer's [`Linear::fold_bias_into_rows`] (inference copies).
    pub fn fold_input_bias_into_rows(&mut self, start: usize) -> candle_core::Result<()> {
        self.input.linear.fold_bias_into_rows(start)
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut h = self.input.forward(x)?;
        for block in &self.blocks {
            h = block.forward(&h)?;
        }
        Ok(h)
    }
}

/// Scale every sample's features to [0, 1]: (s - min) / (max - min), as in MuZero's appendix.
///
/// # Shapes
/// `s`: `[B, ...]`, flattened per sample for the statistics.
pub fn min_max_scale(s: &Tensor) -> candle_core::Result<Tensor> {
    // Inference on CUDA (no gradient to track): one fused kernel over each sample's features.
    if s.device().is_cuda() && !s.track_op() && fused::fusable_elementwise(&[s]) {
        let dims = s.dims().to_vec();
        return fused::min_max_scale_rows(&s.flatten_from(1)?)?.reshape(dims);
    }
    // The CPU in f32 (training too): one op each way.
    if s.device().is_cpu() && fused::fusable(&[s]) && s.rank() >= 2 {
        let dims = s.dims().to_vec();
        return fused::min_max_scale_rows_differentiable(&s.flatten_from(1)?)?.reshape(dims);
    }
    min_max_scale_written_out(s)
}

/// [`min_max_scale`] as candle's elementary ops.
pub fn min_max_scale_written_out(s: &Tensor) -> candle_core::Result<Tensor> {
    if s.rank() == 2 {
        let min = s.min_keepdim(1)?;
        let scale = ((s.max_keepdim(1)? - &min)? + 1e-5)?;
        return s.broadcast_sub(&min)?.broadcast_div(&scale);
    }
    let dims = s.dims().to_vec();
    let flat = s.flatten_from(1)?;
    let min = flat.min_keepdim(1)?;
    let max = flat.max_keepdim(1)?;
    let scale = ((max - &min)? + 1e-5)?;
    flat.broadcast_sub(&min)?
        .broadcast_div(&scale)?
        .reshape(dims)
}

/// Identity forward, gradient multiplied by `scale` backward.
pub fn scale_gradient(x: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && fused::fusable(&[x]) {
        return fused::scale_gradient(x, scale);
    }
    (x * scale)? + (x.detach() * (1.0 - scale))?
}
