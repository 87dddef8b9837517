//! The conv networks' inference on host memory: representation, dynamics and prediction over
//! `Vec<f32>` with `host_conv_trunk`'s layer code, for searches and target values on the CPU
//! in f32 (for searches that ask for it, the trunks' convolutions in bf16 with f32 sums:
//! [`HostConv::with_bf16`]).
//!
//! Through candle, a conv network call is the trunk op between a few dozen tensor ops (the
//! action planes, the min-max scaling, the 1 x 1 head convolutions, the dense heads), each
//! with its allocation and dispatch, and every call turns the filters into the kernels'
//! layouts again; at a search's batch (5 to 32 boards) that fixed cost is most of a call. Here
//! the filters are turned once per network, the boards stay channels-last from the
//! observation on (latents are `[H, W, C]` per board), and a call is the trunks' layers and a
//! few small products. The result equals the candle network's to float rounding (tested);
//! CUDA, bf16 compute and value prefixes keep the tensor path ([`HostConv::supports`]).

use candle_core::DType;

use super::fused::dot;
use super::host_conv_trunk::{to_channels_last, TrunkOnChunks, TrunkShape};
use super::host_inference::{HostInference, HostOutputs, HostStep};
use super::host_mlp::{host_values, min_max_scale, HostLinear, Weights};
use super::{MuZeroNetwork, NetworkError, NetworkSpec};

/// Board positions a call runs through the networks at a time (whole boards, at least one).
const CHUNK_POSITIONS: usize = 512;

/// Boards from which a call splits in two halves on two threads: a board costs the trunks'
/// convolutions over all its positions (about 0.1 ms for Connect Four's 2-block, 32-channel
/// network), so a few are enough to pay for the second thread. The exact-rules search asks for
/// its new positions' values in calls of up to one board per game in play.
const SPLIT_BOARDS: usize = 4;

/// The conv trunk `name` of `params` (`stem`: a first layer `{name}.input` + `{name}.norm`
/// before the blocks) over `input` channels of `board` boards, with its parameters' names and
/// lengths in the packed order; `training` keeps what a backward pass needs, `bf16` (for
/// inference alone) convolves in bf16 where the CPU can ([`TrunkOnChunks::for_inference`]).
pub(crate) fn load_trunk(
    params: &Weights,
    name: &str,
    (stem, blocks): (bool, usize),
    input: usize,
    board: (usize, usize),
    (training, bf16): (bool, bool),
) -> Result<(TrunkOnChunks, Vec<(String, usize)>), NetworkError> {
    let mut layers: Vec<[String; 2]> = Vec::new();
    if stem {
        layers.push([format!("{name}.input"), format!("{name}.norm")]);
    }
    for i in 0..blocks {
        let block = format!("{name}.block{i}");
        layers.push([format!("{block}.conv1"), format!("{block}.norm1")]);
        layers.push([format!("{block}.conv2"), format!("{block}.norm2")]);
    }
    let (mut packed, mut names) = (Vec::new(), Vec::new());
    let (mut channels, mut kernel) = (input, 1);
    for [conv, norm] in &layers {
        for param in [
            format!("{conv}.weight"),
            format!("{conv}.bias"),
            format!("{norm}.weight"),
            format!("{norm}.bias"),
        ] {
            let t = params.get(&param)?;
            if param == format!("{conv}.weight") {
                let (o, _, k, _) = t.dims4()?;
                (channels, kernel) = (o, k);
            }
            let values = host_values(t)?;
            names.push((param, values.len()));
            packed.extend(values);
        }
    }
    let shape = TrunkShape {
        input,
        channels,
        kernel: if layers.is_empty() { 3 } else { kernel },
        h: board.0,
        w: board.1,
        stem,
        blocks,
    };
    let trunk = if training {
        TrunkOnChunks::new(shape, &packed)?
    } else {
        TrunkOnChunks::for_inference(shape, &packed, bf16)?
    };
    Ok((trunk, names))
}

/// The weights `[outputs, inputs, 1, 1]` and bias of the 1 x 1 convolution `name`, with its
/// input and output channels.
pub(crate) fn load_pointwise(
    params: &Weights,
    name: &str,
) -> Result<(Vec<f32>, Vec<f32>, usize, usize), NetworkError> {
    let weight = params.get(&format!("{name}.weight"))?;
    let (outputs, inputs, kh, kw) = weight.dims4()?;
    if (kh, kw) != (1, 1) {
        return Err(NetworkError::Candle(candle_core::Error::Msg(format!(
            "{name}: a {kh}x{kw} convolution where a 1x1 one belongs"
        ))));
    }
    let weight = host_values(weight)?;
    let bias = host_values(params.get(&format!("{name}.bias"))?)?;
    Ok((weight, bias, inputs, outputs))
}

/// A 1 x 1 convolution from channels-last boards `x` (`[rows, hw, c]`) to channels-first
/// planes (`[rows, o, hw]`, the order the dense heads flatten them in): `y[o] = b[o] + sum_c
/// w[o, c] x[c]` at every position, with `weight` `[o, c]`.
pub(crate) fn pointwise(weight: &[f32], bias: &[f32], x: &[f32], hw: usize) -> Vec<f32> {
    let o = bias.len();
    let c = weight.len() / o.max(1);
    let mut out = vec![0f32; x.len() / c.max(1) * o];
    for (sample, planes) in x.chunks_exact(c * hw).zip(out.chunks_exact_mut(o * hw)) {
        for ((filter, &b), plane) in weight
            .chunks_exact(c)
            .zip(bias)
            .zip(planes.chunks_exact_mut(hw))
        {
            for (y, position) in plane.iter_mut().zip(sample.chunks_exact(c)) {
                *y = b + dot(filter, position);
            }
        }
    }
    out
}

/// The dynamics trunk's input from channels-last latents (`[rows, hw, channels]`) and one
/// action per row: at each position the latent's channels, then one channel per action, one
/// for the action taken and zero for the others; with `action_planes` (`[A, hw]`,
/// [`NetworkSpec::action_planes`]; empty: all ones) the action's channel takes its plane's value
/// at the position instead of one.
pub(crate) fn dynamics_input(
    latents: &[f32],
    actions: &[usize],
    (hw, channels, num_actions): (usize, usize, usize),
    action_planes: &[f32],
) -> Result<Vec<f32>, NetworkError> {
    let width = channels + num_actions;
    let mut input = vec![0f32; actions.len() * hw * width];
    for ((row, &action), sample) in latents
        .chunks_exact(hw * channels)
        .zip(actions)
        .zip(input.chunks_exact_mut(hw * width))
    {
        if action >= num_actions {
            return Err(NetworkError::ActionOutOfRange {
                action,
                num_actions,
            });
        }
        let place = action_planes.get(action * hw..(action + 1) * hw);
        for (i, (position, dst)) in row
            .chunks_exact(channels)
            .zip(sample.chunks_exact_mut(width))
            .enumerate()
        {
            dst[..channels].copy_from_slice(position);
            dst[channels + action] = place.map_or(1.0, |p| p[i]);
        }
    }
    Ok(input)
}

/// A 1 x 1 convolution's weights, bias and the ReLU after it.
struct Planes {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Planes {
    fn load(params: &Weights, name: &str) -> Result<Self, NetworkError> {
        let (weight, bias, _, _) = load_pointwise(params, name)?;
        Ok(Self { weight, bias })
    }

    /// `relu(conv1x1(x))` of channels-last boards, channels-first.
    fn forward(&self, x: &[f32], hw: usize) -> Vec<f32> {
        let mut planes = pointwise(&self.weight, &self.bias, x, hw);
        super::host_mlp::relu(&mut planes);
        planes
    }
}

/// `relu(first(x))` then `second`.
struct Dense {
    first: HostLinear,
    second: HostLinear,
}

impl Dense {
    fn load(params: &Weights, first: &str, second: &str) -> Result<Self, NetworkError> {
        Ok(Self {
            first: HostLinear::load(params, first)?,
            second: HostLinear::load(params, second)?,
        })
    }

    fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let mut hidden = Vec::new();
        self.first.forward(x, rows, &mut hidden);
        super::host_mlp::relu(&mut hidden);
        let mut out = Vec::new();
        self.second.forward(&hidden, rows, &mut out);
        out
    }
}

/// The conv MuZero networks' weights on the host, ready for inference (`network::conv`'s
/// architecture: conv trunks, 1 x 1 head convolutions, dense heads).
pub struct HostConv {
    num_actions: usize,
    /// Positions of a board.
    hw: usize,
    /// Channels of an observation and of a latent.
    observation_channels: usize,
    channels: usize,
    obs_len: usize,
    /// [`NetworkSpec::observation_scale`].
    observation_scale: Vec<f32>,
    /// [`NetworkSpec::action_planes`].
    action_planes: Vec<f32>,
    representation: TrunkOnChunks,
    /// Trunk, reward planes, reward head.
    dynamics: (TrunkOnChunks, Planes, Dense),
    /// Blocks, policy planes, `policy_out`, value planes, value head.
    prediction: (TrunkOnChunks, Planes, HostLinear, Planes, Dense),
    /// [`HostInference::splits`].
    split: bool,
}

impl HostConv {
    /// Whether `network` can run here: conv networks without a value prefix, with f32
    /// compute on the CPU (unless the CPU's host paths are off, `fused::set_host_paths`).
    pub fn supports(network: &MuZeroNetwork) -> bool {
        super::fused::host_paths()
            && network.device().is_cpu()
            && network.dtype() == DType::F32
            && network.spec().uses_conv()
            && !network.has_value_prefix()
    }

    /// Read `network`'s weights (no candle op: straight from the parameters' storage).
    pub fn new(network: &MuZeroNetwork) -> Result<Self, NetworkError> {
        Self::with_bf16(network, false)
    }

    /// [`Self::new`], with the trunks' convolutions in bf16 (the input and the filters
    /// rounded, the sums in f32) where `bf16` and the CPU runs `direct_conv::bf16`'s kernel.
    pub fn with_bf16(network: &MuZeroNetwork, bf16: bool) -> Result<Self, NetworkError> {
        if !Self::supports(network) {
            return Err(NetworkError::Candle(candle_core::Error::Msg(
                "host conv inference needs a conv network without a value prefix, computing \
                 in f32 on the CPU"
                    .into(),
            )));
        }
        let tensors = network.params().tensors_by_name();
        Self::load(network.spec(), &Weights(&tensors), bf16)
    }

    fn load(spec: &NetworkSpec, params: &Weights, bf16: bool) -> Result<Self, NetworkError> {
        let shape = &spec.observation_shape;
        let (c, board) = (shape[0], (shape[1], shape[2]));
        let (ch, blocks, a) = (spec.conv_channels, spec.num_blocks, spec.num_actions);
        let trunk = |name: &str, stem: bool, input: usize| {
            load_trunk(params, name, (stem, blocks), input, board, (false, bf16)).map(|(t, _)| t)
        };
        let representation = trunk("representation.trunk", true, c)?;
        Ok(Self {
            num_actions: a,
            hw: board.0 * board.1,
            observation_channels: c,
            channels: representation.shape().channels,
            obs_len: spec.obs_len(),
            observation_scale: spec.observation_scale.clone(),
            action_planes: spec.action_planes.clone(),
            representation,
            dynamics: (
                trunk("dynamics.trunk", true, ch + a)?,
                Planes::load(params, "dynamics.reward_conv")?,
                Dense::load(params, "dynamics.reward_hidden", "dynamics.reward_out")?,
            ),
            prediction: (
                trunk("prediction", false, ch)?,
                Planes::load(params, "prediction.policy_conv")?,
                HostLinear::load(params, "prediction.policy_out")?,
                Planes::load(params, "prediction.value_conv")?,
                Dense::load(params, "prediction.value_hidden", "prediction.value_out")?,
            ),
            split: true,
        })
    }

    /// Every call on this thread alone, whatever its batch (for a model that already runs
    /// beside another, see `Model::fork`).
    pub fn serial(self) -> Self {
        Self {
            split: false,
            ..self
        }
    }

    /// Boards a call runs through the networks at a time: the layers' buffers of a few
    /// hundred positions stay in the core's cache, where a whole batch's would not.
    fn boards_per_chunk(&self) -> usize {
        (CHUNK_POSITIONS / self.hw.max(1)).max(1)
    }

    /// h: observations `[B * obs_len]` (channels-first, unscaled) -> latents (channels-last)
    /// in [0, 1].
    fn represent(&self, observations: &[f32]) -> Vec<f32> {
        let rows = observations.len() / self.obs_len.max(1);
        let scaled = super::scale_observations(&self.observation_scale, observations);
        let mut boards = vec![0f32; scaled.len()];
        to_channels_last(&scaled, self.observation_channels, self.hw, &mut boards);
        let mut latents = vec![0f32; rows * self.latent_dim()];
        self.representation.forward(&boards, &mut latents, false);
        min_max_scale(&mut latents, self.latent_dim());
        latents
    }

    /// g: latents and actions `[B]` -> (next latents, reward logits `[B, R]`).
    fn dynamics(
        &self,
        latents: &[f32],
        actions: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>), NetworkError> {
        let rows = actions.len();
        let input = dynamics_input(
            latents,
            actions,
            (self.hw, self.channels, self.num_actions),
            &self.action_planes,
        )?;
        let (trunk, reward_planes, reward_head) = &self.dynamics;
        let mut next = vec![0f32; rows * self.latent_dim()];
        trunk.forward(&input, &mut next, false);
        let planes = reward_planes.forward(&next, self.hw);
        let reward_logits = reward_head.forward(&planes, rows);
        min_max_scale(&mut next, self.latent_dim());
        Ok((next, reward_logits))
    }

    /// f: latents -> policy and value logits.
    fn predict(&self, latents: &[f32]) -> HostOutputs {
        let rows = latents.len() / self.latent_dim().max(1);
        let (trunk, policy_planes, policy_out, value_planes, value_head) = &self.prediction;
        let mut h = vec![0f32; latents.len()];
        trunk.forward(latents, &mut h, false);
        let planes = policy_planes.forward(&h, self.hw);
        let mut policy_logits = Vec::new();
        policy_out.forward(&planes, rows, &mut policy_logits);
        let planes = value_planes.forward(&h, self.hw);
        let value_logits = value_head.forward(&planes, rows);
        HostOutputs {
            policy_logits,
            value_logits,
        }
    }
}

impl HostInference for HostConv {
    fn obs_len(&self) -> usize {
        self.obs_len
    }

    /// Values of a latent (channels-last boards).
    fn latent_dim(&self) -> usize {
        self.channels * self.hw
    }

    fn splits(&self) -> bool {
        self.split
    }

    fn split_rows(&self) -> usize {
        SPLIT_BOARDS
    }

    fn initial_serial(&self, observations: &[f32]) -> (Vec<f32>, HostOutputs) {
        let mut latents =
            Vec::with_capacity(observations.len() / self.obs_len.max(1) * self.latent_dim());
        let mut outputs = HostOutputs::default();
        for chunk in observations.chunks(self.boards_per_chunk() * self.obs_len.max(1)) {
            let latent = self.represent(chunk);
            outputs = outputs.append(self.predict(&latent));
            latents.extend(latent);
        }
        (latents, outputs)
    }

    fn recurrent_serial(
        &self,
        latents: &[f32],
        actions: &[usize],
    ) -> Result<HostStep, NetworkError> {
        let boards = self.boards_per_chunk();
        let mut step = HostStep::default();
        for (latents, actions) in latents
            .chunks(boards * self.latent_dim())
            .zip(actions.chunks(boards))
        {
            let (next, reward_logits) = self.dynamics(latents, actions)?;
            let outputs = self.predict(&next);
            step = step.append(HostStep {
                latents: next,
                reward_logits,
                outputs,
            });
        }
        Ok(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    /// A conv network over `shape` boards with 3 actions, `channels` channels and `blocks`
    /// blocks, every parameter moved off its initial value so that every layer matters.
    fn network(shape: [usize; 3], channels: usize, blocks: usize) -> MuZeroNetwork {
        let spec = NetworkSpec {
            num_blocks: blocks,
            conv_channels: channels,
            ..crate::testing::specs::tiny_spec(shape.to_vec(), 3)
        };
        crate::testing::specs::perturbed_network(spec, 5)
    }

    fn close(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "{what}[{i}]: host {x} vs candle {y}"
            );
        }
    }

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    /// Channels-first latents `[n, C, H*W]` as the host's channels-last ones.
    fn channels_last(t: &Tensor, c: usize, hw: usize) -> Vec<f32> {
        let v = values(t);
        let mut out = vec![0f32; v.len()];
        to_channels_last(&v, c, hw, &mut out);
        out
    }

    /// The first call, the recurrent call and each of their outputs equal the candle
    /// network's, with 0, 1 and 2 blocks, with 4 channels (the patch-matrix convolutions) and
    /// 16 (the direct kernel where the CPU has it); an action out of range is an error.
    #[test]
    fn host_conv_inference_equals_the_candle_network() {
        for (shape, channels, blocks) in [
            ([2, 3, 4], 4, 1),
            ([3, 5, 6], 16, 1),
            ([2, 4, 4], 8, 2),
            ([2, 3, 4], 4, 0),
        ] {
            let net = network(shape, channels, blocks);
            assert!(HostConv::supports(&net));
            let host = HostConv::new(&net).unwrap();
            let hw = shape[1] * shape[2];
            let batch = 5;
            let obs_len: usize = shape.iter().product();
            let obs: Vec<f32> = (0..batch * obs_len)
                .map(|i| f32::from(u8::from((i * 7 + i / 5) % 3 == 0)))
                .collect();
            let case = format!("{channels} channels, {blocks} blocks");
            let (latents, out) = host.initial(&obs);
            let want_latent = net
                .represent(&net.observation_tensor(&obs).unwrap())
                .unwrap();
            close(
                &latents,
                &channels_last(&want_latent, channels, hw),
                &format!("{case}: latent"),
            );
            let (policy, value) = net.predict(&want_latent).unwrap();
            close(
                &out.policy_logits,
                &values(&policy),
                &format!("{case}: policy"),
            );
            close(
                &out.value_logits,
                &values(&value),
                &format!("{case}: value"),
            );
            let actions = [2, 0, 1, 2, 1];
            let step = host.recurrent(&latents, &actions).unwrap();
            assert!(
                host.recurrent(&latents, &[0, 1, 3, 0, 0]).is_err(),
                "action 3 of 3"
            );
            let (want_next, want_reward) = net
                .dynamics(&want_latent, &net.action_tensor(&actions).unwrap())
                .unwrap();
            close(
                &step.latents,
                &channels_last(&want_next, channels, hw),
                &format!("{case}: next latent"),
            );
            close(
                &step.reward_logits,
                &values(&want_reward),
                &format!("{case}: reward"),
            );
            let (policy, value) = net.predict(&want_next).unwrap();
            let next = &step.outputs;
            close(
                &next.policy_logits,
                &values(&policy),
                &format!("{case}: next policy"),
            );
            close(
                &next.value_logits,
                &values(&value),
                &format!("{case}: next value"),
            );
        }
    }

    /// With action planes (each of 4 actions marks its column of a 3 x 4 board) the recurrent
    /// call equals the candle network's, and the planes change what the dynamics predicts.
    #[test]
    fn host_conv_dynamics_with_action_planes_equals_the_candle_network() {
        let constant = network([2, 3, 4], 8, 1);
        let spec = NetworkSpec {
            num_actions: 4,
            action_planes: cumind_envs::board_action_planes(3, 4, 4),
            ..constant.spec().clone()
        };
        let net = crate::testing::specs::perturbed_network(spec.clone(), 5);
        let plain = crate::testing::specs::perturbed_network(
            NetworkSpec {
                action_planes: Vec::new(),
                ..spec
            },
            5,
        );
        let (host, host_plain) = (HostConv::new(&net).unwrap(), HostConv::new(&plain).unwrap());
        let obs: Vec<f32> = (0..4 * 24)
            .map(|i| f32::from(u8::from((i * 5 + i / 7) % 3 == 0)))
            .collect();
        let (latents, _) = host.initial(&obs);
        let want_latent = net
            .represent(&net.observation_tensor(&obs).unwrap())
            .unwrap();
        let actions = [3, 0, 2, 1];
        let step = host.recurrent(&latents, &actions).unwrap();
        let (want_next, want_reward) = net
            .dynamics(&want_latent, &net.action_tensor(&actions).unwrap())
            .unwrap();
        close(
            &step.latents,
            &channels_last(&want_next, 8, 12),
            "next latent",
        );
        close(&step.reward_logits, &values(&want_reward), "reward");
        let other = host_plain.recurrent(&latents, &actions).unwrap();
        let moved = step
            .latents
            .iter()
            .zip(&other.latents)
            .any(|(a, b)| (a - b).abs() > 1e-3);
        assert!(moved, "constant planes give another next latent");
    }

    /// In bf16 the host network gives what it gives in f32 to bf16's precision, initial and
    /// recurrent calls, on trunks the direct kernel runs (16 and 32 channels); the results
    /// differ from f32's where the CPU runs the bf16 kernel and are the same bits elsewhere.
    #[test]
    fn bf16_inference_is_f32_inference_to_bf16_precision() {
        let bf16_runs = crate::network::direct_conv::bf16::runs_here();
        for (shape, channels) in [([3, 5, 6], 16), ([3, 6, 7], 32)] {
            let net = network(shape, channels, 2);
            let (full, half) = (
                HostConv::new(&net).unwrap(),
                HostConv::with_bf16(&net, true).unwrap(),
            );
            let batch = 6;
            let obs_len: usize = shape.iter().product();
            let obs: Vec<f32> = (0..batch * obs_len)
                .map(|i| f32::from(u8::from((i * 7 + i / 5) % 3 == 0)))
                .collect();
            let actions = [2, 0, 1, 2, 1, 0];
            let run = |host: &HostConv| {
                let (latents, out) = host.initial(&obs);
                let step = host.recurrent(&latents, &actions).unwrap();
                [
                    latents,
                    out.policy_logits,
                    out.value_logits,
                    step.latents,
                    step.reward_logits,
                    step.outputs.policy_logits,
                    step.outputs.value_logits,
                ]
            };
            let (want, got) = (run(&full), run(&half));
            for (w, g) in want.iter().zip(&got) {
                for (a, b) in g.iter().zip(w) {
                    assert!(
                        (a - b).abs() <= 0.05 * (1.0 + b.abs()),
                        "{channels} channels: bf16 {a} against f32 {b}"
                    );
                }
            }
            assert_eq!(want != got, bf16_runs, "{channels} channels");
        }
    }

    /// A batch large enough to run as two halves side by side gives each row what the row
    /// gives alone.
    #[test]
    fn a_split_batch_equals_its_rows_one_by_one() {
        let net = network([2, 3, 4], 8, 1);
        let host = HostConv::new(&net).unwrap();
        let batch = SPLIT_BOARDS + 3;
        let obs: Vec<f32> = (0..batch * 24).map(|i| (i as f32 * 0.29).sin()).collect();
        let (latents, first) = host.initial(&obs);
        let actions: Vec<usize> = (0..batch).map(|i| i % 3).collect();
        let step = host.recurrent(&latents, &actions).unwrap();
        let l = host.latent_dim();
        for row in [0, batch / 2 - 1, batch / 2, batch - 1] {
            let (one, out) = host.initial(&obs[row * 24..(row + 1) * 24]);
            close(&one, &latents[row * l..(row + 1) * l], "initial latent");
            let v = out.value_logits.len();
            close(
                &out.value_logits,
                &first.value_logits[row * v..(row + 1) * v],
                "value",
            );
            let alone = host.recurrent(&one, &actions[row..=row]).unwrap();
            close(
                &alone.latents,
                &step.latents[row * l..(row + 1) * l],
                "next latent",
            );
            let r = alone.reward_logits.len();
            close(
                &alone.reward_logits,
                &step.reward_logits[row * r..(row + 1) * r],
                "reward",
            );
        }
    }
}
