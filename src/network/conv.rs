//! Representation, dynamics and prediction networks for image-like observations `[C, H, W]`
//! (board planes): a small conv ResNet whose latent state keeps the board's spatial shape.

use candle_core::{DType, Tensor};

use super::fused::{fusable, fused_kernels, layer_norm, layer_norm_then, norm_then, relu};
use super::host_conv_trunk::{self, TrunkShape};
use super::layers::{cast, min_max_scale, scale_and_shift, standardize, Head, Linear};
use super::params::ParamBuilder;
use super::{host_conv, unfold};
use super::{NetworkError, NetworkSpec};

/// 2-D convolution with f32 weights, "same" padding. On the CPU the convolution runs in f32
/// (`host_conv::conv2d`; candle's conv2d with the fused kernels off) and the result is cast
/// back to the compute dtype; on CUDA a bf16 convolution runs on the tensor cores
/// (`unfold::conv2d_implicit`), an f32 one as `unfold::conv2d`.
#[derive(Clone, Debug)]
pub struct Conv2d {
    weight: Tensor,
    bias: Tensor,
    padding: usize,
}

impl Conv2d {
    pub fn new(
        pb: &mut ParamBuilder,
        name: &str,
        input: usize,
        output: usize,
        kernel: usize,
    ) -> Result<Self, NetworkError> {
        let bound = 1.0 / ((input * kernel * kernel) as f32).sqrt();
        pb.push(name);
        let weight = pb.uniform("weight", &[output, input, kernel, kernel], bound);
        let bias = pb.uniform("bias", &[output], bound);
        pb.pop();
        Ok(Self {
            weight: weight?,
            bias: bias?,
            padding: kernel / 2,
        })
    }

    /// # Shapes
    /// `x`: `[B, in, H, W]` -> `[B, out, H, W]`, in `x`'s dtype.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        let compute = if x.device().is_cpu() {
            DType::F32
        } else {
            dtype
        };
        let x = cast(x, compute)?;
        let kernel = self.padding * 2 + 1;
        if kernel == 1 && host_conv::convolves(&x, kernel) {
            return cast(&host_conv::conv1x1(&x, &self.weight, &self.bias)?, dtype);
        }
        if host_conv::convolves(&x, kernel) {
            return cast(&host_conv::conv2d(&x, &self.weight, &self.bias)?, dtype);
        }
        if unfold::convolves_implicitly(&x, kernel) {
            return unfold::conv2d_implicit(
                &x,
                &cast(&self.weight, dtype)?,
                &cast(&self.bias, dtype)?,
            );
        }
        if unfold::unfolds(&x, kernel) {
            return unfold::conv2d(&x, &self.weight, &self.bias);
        }
        let y = x.conv2d(&cast(&self.weight, compute)?, self.padding, 1, 1, 1)?;
        let y = y.broadcast_add(&cast(&self.bias, compute)?.reshape((1, (), 1, 1))?)?;
        cast(&y, dtype)
    }
}

/// Normalisation over (C, H, W) of each sample with a per-channel scale and shift, in f32.
#[derive(Clone, Debug)]
pub struct PlaneNorm {
    gamma: Tensor,
    beta: Tensor,
}

impl PlaneNorm {
    pub fn new(pb: &mut ParamBuilder, name: &str, channels: usize) -> Result<Self, NetworkError> {
        let (gamma, beta) = scale_and_shift(pb, name, channels)?;
        Ok(Self { gamma, beta })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if (x.device().is_cuda() && fused_kernels()) || fusable(&[x]) {
            return self.forward_fused(x);
        }
        self.forward_written_out(x)
    }

    /// The normalisation written out with candle's ops (statistics in f32).
    fn forward_written_out(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let normed = standardize(&x.flatten_from(1)?, 1e-5)?.reshape(x.dims())?;
        let out = normed
            .broadcast_mul(&self.gamma.reshape((1, (), 1, 1))?)?
            .broadcast_add(&self.beta.reshape((1, (), 1, 1))?)?;
        cast(&out, x.dtype())
    }

    /// The same normalisation as one fused layer norm over each sample's C * H * W values,
    /// with the per-channel scale and shift spread over the board: one op where the written-out
    /// form issues about ten, each a pass over the whole batch (CUDA, and f32 on the CPU).
    pub fn forward_fused(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (gamma, beta) = self.spread(x)?;
        let out = layer_norm(&x.flatten_from(1)?, &gamma, &beta, 1e-5)?;
        out.reshape(x.dims())
    }

    /// `relu?(residual? + norm(x))`: on CUDA with the fused kernels one op, in inference
    /// (`fused::layer_norm_then`) and in training (`fused::norm_then`, with its own backward
    /// pass); otherwise the norm, the add and the ReLU in turn.
    pub fn forward_then(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        relu_after: bool,
    ) -> candle_core::Result<Tensor> {
        let tracked = x.track_op()
            || self.gamma.track_op()
            || self.beta.track_op()
            || residual.is_some_and(Tensor::track_op);
        if tracked && x.device().is_cuda() && fused_kernels() {
            return norm_then(x, residual, &self.gamma, &self.beta, 1e-5, relu_after);
        }
        if x.device().is_cuda() && fused_kernels() {
            let (_, _, h, w) = x.dims4()?;
            let residual = residual.map(|r| r.flatten_from(1)).transpose()?;
            let out = layer_norm_then(
                &x.flatten_from(1)?,
                residual.as_ref(),
                &self.gamma,
                &self.beta,
                h * w,
                1e-5,
                relu_after,
            )?;
            return out.reshape(x.dims());
        }
        let mut y = self.forward(x)?;
        if let Some(r) = residual {
            y = (r + y)?;
        }
        if relu_after {
            y = relu(&y)?;
        }
        Ok(y)
    }

    /// The per-channel scale and shift spread over `x`'s board: `[C * H * W]` each.
    fn spread(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let (_, c, h, w) = x.dims4()?;
        let spread = |t: &Tensor| -> candle_core::Result<Tensor> {
            t.reshape((c, 1))?
                .broadcast_as((c, h * w))?
                .contiguous()?
                .flatten_all()
        };
        Ok((spread(&self.gamma)?, spread(&self.beta)?))
    }
}

/// conv3x3 -> norm -> relu -> conv3x3 -> norm, plus the input, then relu.
#[derive(Clone, Debug)]
pub struct ResConvBlock {
    conv1: Conv2d,
    norm1: PlaneNorm,
    conv2: Conv2d,
    norm2: PlaneNorm,
}

impl ResConvBlock {
    pub fn new(pb: &mut ParamBuilder, name: &str, channels: usize) -> Result<Self, NetworkError> {
        pb.push(name);
        let conv1 = Conv2d::new(pb, "conv1", channels, channels, 3);
        let norm1 = PlaneNorm::new(pb, "norm1", channels);
        let conv2 = Conv2d::new(pb, "conv2", channels, channels, 3);
        let norm2 = PlaneNorm::new(pb, "norm2", channels);
        pb.pop();
        Ok(Self {
            conv1: conv1?,
            norm1: norm1?,
            conv2: conv2?,
            norm2: norm2?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self
            .norm1
            .forward_then(&self.conv1.forward(x)?, None, true)?;
        self.norm2
            .forward_then(&self.conv2.forward(&h)?, Some(x), true)
    }
}

/// conv3x3 (in -> channels) -> norm -> relu, then residual blocks.
#[derive(Clone, Debug)]
pub struct ConvTrunk {
    input: Conv2d,
    norm: PlaneNorm,
    blocks: Vec<ResConvBlock>,
}

impl ConvTrunk {
    pub fn new(
        pb: &mut ParamBuilder,
        name: &str,
        input: usize,
        channels: usize,
        num_blocks: usize,
    ) -> Result<Self, NetworkError> {
        pb.push(name);
        let conv = Conv2d::new(pb, "input", input, channels, 3);
        let norm = PlaneNorm::new(pb, "norm", channels);
        let blocks: Result<Vec<_>, _> = (0..num_blocks)
            .map(|i| ResConvBlock::new(pb, &format!("block{i}"), channels))
            .collect();
        pb.pop();
        Ok(Self {
            input: conv?,
            norm: norm?,
            blocks: blocks?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if host_conv_trunk::runs(x) {
            return trunk_on_host(x, Some((&self.input, &self.norm)), &self.blocks);
        }
        self.forward_layer_by_layer(x)
    }

    /// The trunk as one op per layer (what every device but the CPU runs).
    fn forward_layer_by_layer(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut h = self
            .norm
            .forward_then(&self.input.forward(x)?, None, true)?;
        for block in &self.blocks {
            h = block.forward(&h)?;
        }
        Ok(h)
    }
}

/// A stem (conv -> norm -> ReLU) if any, then `blocks`, over `x` as one host op
/// (`host_conv_trunk`).
fn trunk_on_host(
    x: &Tensor,
    stem: Option<(&Conv2d, &PlaneNorm)>,
    blocks: &[ResConvBlock],
) -> candle_core::Result<Tensor> {
    let mut params: Vec<&Tensor> = Vec::new();
    if let Some((conv, norm)) = stem {
        params.extend([&conv.weight, &conv.bias, &norm.gamma, &norm.beta]);
    }
    for b in blocks {
        params.extend([
            &b.conv1.weight,
            &b.conv1.bias,
            &b.norm1.gamma,
            &b.norm1.beta,
        ]);
        params.extend([
            &b.conv2.weight,
            &b.conv2.bias,
            &b.norm2.gamma,
            &b.norm2.beta,
        ]);
    }
    let Some(first) = params.first() else {
        return Ok(x.clone());
    };
    let (channels, _, kernel, _) = first.dims4()?;
    let (_, input, h, w) = x.dims4()?;
    let shape = TrunkShape {
        input,
        channels,
        kernel,
        h,
        w,
        stem: stem.is_some(),
        blocks: blocks.len(),
    };
    host_conv_trunk::forward(x, shape, &params)
}

fn board(spec: &NetworkSpec) -> (usize, usize, usize) {
    let s = &spec.observation_shape;
    (s[0], s[1], s[2])
}

/// h(obs `[B, C, H, W]`) -> latent `[B, channels, H, W]`.
#[derive(Clone, Debug)]
pub struct ConvRepresentation {
    trunk: ConvTrunk,
}

impl ConvRepresentation {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        let (c, _, _) = board(spec);
        pb.push("representation");
        let trunk = ConvTrunk::new(pb, "trunk", c, spec.conv_channels, spec.num_blocks);
        pb.pop();
        Ok(Self { trunk: trunk? })
    }

    pub fn forward(&self, obs: &Tensor) -> candle_core::Result<Tensor> {
        min_max_scale(&self.trunk.forward(obs)?)
    }
}

/// g(latent, action planes) -> (latent', reward logits).
#[derive(Clone, Debug)]
pub struct ConvDynamics {
    trunk: ConvTrunk,
    reward_conv: Conv2d,
    reward: Head,
    board: (usize, usize),
    /// [`NetworkSpec::action_planes`] as `[1, A, H, W]` f32 (None: constant planes).
    action_planes: Option<Tensor>,
}

impl ConvDynamics {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        let (_, h, w) = board(spec);
        let ch = spec.conv_channels;
        pb.push("dynamics");
        let trunk = ConvTrunk::new(pb, "trunk", ch + spec.num_actions, ch, spec.num_blocks);
        let reward_conv = Conv2d::new(pb, "reward_conv", ch, spec.reward_head_channels, 1);
        let reward = Head::new(
            pb,
            "reward",
            spec.reward_head_input_dim(),
            spec.hidden_dim,
            spec.reward_support.size(),
        );
        pb.pop();
        let action_planes = match spec.action_planes.len() {
            0 => None,
            n if n == spec.num_actions * h * w => Some(Tensor::from_vec(
                spec.action_planes.clone(),
                (1, spec.num_actions, h, w),
                pb.device(),
            )?),
            n => {
                return Err(NetworkError::Candle(candle_core::Error::Msg(format!(
                    "{n} action-plane values for {} actions on a {h} x {w} board",
                    spec.num_actions
                ))))
            }
        };
        Ok(Self {
            trunk: trunk?,
            reward_conv: reward_conv?,
            reward: reward?,
            board: (h, w),
            action_planes,
        })
    }

    /// # Shapes
    /// `latent`: `[B, ch, H, W]`, `action_one_hot`: `[B, A]` (broadcast to A constant planes,
    /// or times the spec's action planes).
    pub fn forward(
        &self,
        latent: &Tensor,
        action_one_hot: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let (next, features) = self.features(latent, action_one_hot)?;
        Ok((next, self.reward_head(&features)?))
    }

    /// The latent and the reward features (the reward planes, flattened: `[B, planes * H * W]`),
    /// without the reward head: what a value prefix's LSTM reads.
    pub fn features(
        &self,
        latent: &Tensor,
        action_one_hot: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let (b, a) = action_one_hot.dims2()?;
        let (h, w) = self.board;
        let planes = action_one_hot
            .reshape((b, a, 1, 1))?
            .broadcast_as((b, a, h, w))?;
        let planes = match &self.action_planes {
            Some(place) => planes.broadcast_mul(&place.to_dtype(planes.dtype())?)?,
            None => planes.contiguous()?,
        };
        let x = Tensor::cat(&[latent, &planes], 1)?;
        let hidden = self.trunk.forward(&x)?;
        let next = min_max_scale(&hidden)?;
        let r = relu(&self.reward_conv.forward(&hidden)?)?.flatten_from(1)?;
        Ok((next, r))
    }

    /// Reward (or value prefix) logits of `[B, reward_head_input_dim]` features.
    pub fn reward_head(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.reward.forward(x)
    }
}

/// f(latent) -> (policy logits, value logits).
#[derive(Clone, Debug)]
pub struct ConvPrediction {
    blocks: Vec<ResConvBlock>,
    policy_conv: Conv2d,
    policy_out: Linear,
    value_conv: Conv2d,
    value: Head,
}

impl ConvPrediction {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        let (_, h, w) = board(spec);
        let ch = spec.conv_channels;
        pb.push("prediction");
        let blocks: Result<Vec<_>, _> = (0..spec.num_blocks)
            .map(|i| ResConvBlock::new(pb, &format!("block{i}"), ch))
            .collect();
        let (pc, vc) = (spec.policy_head_channels, spec.value_head_channels);
        let policy_conv = Conv2d::new(pb, "policy_conv", ch, pc, 1);
        let policy_out = Linear::new(pb, "policy_out", pc * h * w, spec.num_actions, false);
        let value_conv = Conv2d::new(pb, "value_conv", ch, vc, 1);
        let value = Head::new(
            pb,
            "value",
            vc * h * w,
            spec.hidden_dim,
            spec.value_support.size(),
        );
        pb.pop();
        Ok(Self {
            blocks: blocks?,
            policy_conv: policy_conv?,
            policy_out: policy_out?,
            value_conv: value_conv?,
            value: value?,
        })
    }

    pub fn forward(&self, latent: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let h = if host_conv_trunk::runs(latent) {
            trunk_on_host(latent, None, &self.blocks)?
        } else {
            let mut h = latent.clone();
            for block in &self.blocks {
                h = block.forward(&h)?;
            }
            h
        };
        let p = relu(&self.policy_conv.forward(&h)?)?.flatten_from(1)?;
        let policy = self.policy_out.forward(&p)?;
        let v = relu(&self.value_conv.forward(&h)?)?.flatten_from(1)?;
        let value = self.value.forward(&v)?;
        Ok((policy, value))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Var;

    use super::*;
    use crate::testing::tensors::{assert_close, max_abs_difference, uniform, values};

    /// The output of a stem (if any) and `blocks` over `x`, on the host as one op or layer by
    /// layer, and the gradients of `x` and of every variable in `vars`.
    fn trunk_and_gradients(
        stem: Option<(&Conv2d, &PlaneNorm)>,
        blocks: &[ResConvBlock],
        vars: &[Var],
        x: &Var,
        mix: &Tensor,
        host: bool,
    ) -> Vec<Vec<f32>> {
        let y = if host {
            trunk_on_host(x.as_tensor(), stem, blocks).unwrap()
        } else {
            let mut h = match stem {
                Some((conv, norm)) => norm
                    .forward_then(&conv.forward(x.as_tensor()).unwrap(), None, true)
                    .unwrap(),
                None => x.as_tensor().clone(),
            };
            for block in blocks {
                h = block.forward(&h).unwrap();
            }
            h
        };
        let grads = (&y * mix).unwrap().sum_all().unwrap().backward().unwrap();
        let mut out = vec![values(&y), values(grads.get(x.as_tensor()).unwrap())];
        // The stem's variables, without a stem, have no gradient either way.
        out.extend(
            vars.iter()
                .map(|v| grads.get(v.as_tensor()).map(values).unwrap_or_default()),
        );
        out
    }

    /// The trunk as one host op equals the trunk layer by layer (host convolutions and fused
    /// norms, themselves tested against candle's ops), forward and every gradient: with and
    /// without a stem, with 0 to 2 blocks, over a batch of several chunks with a short last
    /// one, every norm's scale and shift drawn at random; with 5 channels and with the
    /// presets' 16 and 32; after a pass over other values, whose buffers the host trunk reuses.
    #[test]
    fn the_host_trunk_equals_the_layer_by_layer_trunk_and_its_gradients() {
        let (b, h, w) = (29, 6, 7);
        for (stem, blocks, input, channels, seed) in [
            (true, 2, 3, 5, 1),
            (false, 2, 5, 5, 2),
            (true, 0, 4, 5, 3),
            (true, 1, 16, 16, 4),
            (false, 1, 32, 32, 5),
            (true, 1, 39, 32, 6),
        ] {
            let mut pb = ParamBuilder::random(seed, &candle_core::Device::Cpu);
            let trunk = ConvTrunk::new(&mut pb, "trunk", input, channels, blocks).unwrap();
            let vars = pb.finish().unwrap().vars();
            for (i, v) in vars.iter().enumerate() {
                v.set(&uniform(v.dims(), 1.0, 100 + i as u64)).unwrap();
            }
            let stem = stem.then_some((&trunk.input, &trunk.norm));
            let x = Var::from_tensor(&uniform(&[b, input, h, w], 2.0, seed + 10)).unwrap();
            let mix = uniform(&[b, channels, h, w], 1.0, seed + 20);
            // A pass over other values first: the host trunk's next pass reuses its buffers
            // (`recycled`), whose old contents must not leak into the results.
            let other = Var::from_tensor(&uniform(&[b, input, h, w], 3.0, seed + 30)).unwrap();
            trunk_and_gradients(stem, &trunk.blocks, &vars, &other, &mix, true);
            let ours = trunk_and_gradients(stem, &trunk.blocks, &vars, &x, &mix, true);
            let theirs = trunk_and_gradients(stem, &trunk.blocks, &vars, &x, &mix, false);
            assert_close(&ours[0], &theirs[0], 1e-4, "outputs");
            assert_close(&ours[1], &theirs[1], 1e-3, "input gradients");
            for (i, (a, b)) in ours[2..].iter().zip(&theirs[2..]).enumerate() {
                assert_close(a, b, 2e-3, &format!("gradient of parameter {i}"));
            }
            assert!(ours[2..].iter().any(|g| g.iter().any(|v| v.abs() > 1e-3)));
        }
    }

    /// CUDA's fused plane norm (a layer norm over C * H * W with the channel's scale and shift
    /// spread over the board) computes the written-out one, forward and every gradient; run
    /// here on the CPU's fused layer norm.
    #[test]
    fn the_fused_plane_norm_equals_the_written_out_one_and_its_gradients() {
        let (b, c, h, w) = (3, 4, 5, 6);
        let x = Var::from_tensor(&uniform(&[b, c, h, w], 2.0, 1)).unwrap();
        let gamma = Var::from_tensor(&uniform(&[c], 2.0, 2)).unwrap();
        let beta = Var::from_tensor(&uniform(&[c], 2.0, 3)).unwrap();
        let norm = PlaneNorm {
            gamma: gamma.as_tensor().clone(),
            beta: beta.as_tensor().clone(),
        };
        let mix = uniform(&[b, c, h, w], 2.0, 4);
        let run = |fused: bool| {
            let y = if fused {
                norm.forward_fused(x.as_tensor()).unwrap()
            } else {
                norm.forward_written_out(x.as_tensor()).unwrap()
            };
            let grads = (&y * &mix).unwrap().sum_all().unwrap().backward().unwrap();
            let g = |v: &Var| values(grads.get(v.as_tensor()).unwrap());
            (values(&y), g(&x), g(&gamma), g(&beta))
        };
        let (ours, theirs) = (run(true), run(false));
        assert_close(&ours.0, &theirs.0, 1e-5, "outputs");
        assert_close(&ours.1, &theirs.1, 1e-4, "input gradients");
        assert_close(&ours.2, &theirs.2, 1e-4, "scale gradients");
        assert_close(&ours.3, &theirs.3, 1e-4, "shift gradients");
        // The scale matters: a plane norm is not the identity on these values.
        assert!(max_abs_difference(&ours.0, &values(x.as_tensor())) > 0.1);
    }
}
