//! What a network call costs, counted from its spec, and the rule that picks the CPU or a GPU
//! for it (`--device auto`).
//!
//! A call on a GPU pays a floor of kernel launches and one device read whatever its size
//! (CartPole's network: about 0.2 ms per recurrent inference at batch 1 on an H200), and then
//! runs its arithmetic far faster than a CPU. A call on the CPU pays for its arithmetic alone.
//! So a GPU pays once a call's arithmetic would keep the CPU busy longer than the GPU's floor.
//! The threshold is measured (the table and the command in docs/benchmarks.md, "Choosing the
//! device").

use super::NetworkSpec;

/// Floating-point operations (2 per multiply-add) of one call of each network for one
/// position: the matrix products and convolutions, which dominate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetworkFlops {
    pub representation: f64,
    pub dynamics: f64,
    pub prediction: f64,
}

impl NetworkFlops {
    pub fn of(spec: &NetworkSpec) -> Self {
        let a = spec.num_actions as f64;
        let hd = spec.hidden_dim as f64;
        let v = spec.value_support.size() as f64;
        let r = spec.reward_support.size() as f64;
        let blocks = spec.num_blocks as f64;
        let macs = if spec.uses_conv() {
            let c = spec.conv_channels as f64;
            let n = (spec.observation_shape[1] * spec.observation_shape[2]) as f64;
            let conv3 = |input: f64| n * input * c * 9.0;
            let planes = spec.observation_shape[0] as f64;
            let (vc, pc, rc) = (
                spec.value_head_channels as f64,
                spec.policy_head_channels as f64,
                spec.reward_head_channels as f64,
            );
            [
                conv3(planes) + blocks * 2.0 * conv3(c),
                conv3(c + a) + blocks * 2.0 * conv3(c) + n * c * rc + n * rc * hd + hd * r,
                blocks * 2.0 * conv3(c) + n * c * (vc + pc) + pc * n * a + vc * n * hd + hd * v,
            ]
        } else {
            let l = spec.latent_dim as f64;
            [
                spec.obs_len() as f64 * hd + blocks * 2.0 * hd * hd + hd * l,
                (l + a) * hd + blocks * 2.0 * hd * hd + hd * l + hd * hd + hd * r,
                l * hd + blocks * 2.0 * hd * hd + hd * a + hd * hd + hd * v,
            ]
        };
        Self {
            representation: 2.0 * macs[0],
            dynamics: 2.0 * macs[1],
            prediction: 2.0 * macs[2],
        }
    }

    /// One initial inference: representation and prediction.
    pub fn initial(&self) -> f64 {
        self.representation + self.prediction
    }

    /// One recurrent inference: dynamics and prediction.
    pub fn recurrent(&self) -> f64 {
        self.dynamics + self.prediction
    }

    /// One training step of `batch` positions unrolled `k` steps: the representation once,
    /// `k` dynamics steps and `k + 1` predictions forward, and twice that backward (the
    /// gradients of the inputs and of the weights). The target network's inference is left
    /// out.
    pub fn training_step(&self, batch: usize, k: usize) -> f64 {
        let forward =
            self.representation + k as f64 * self.dynamics + (k + 1) as f64 * self.prediction;
        3.0 * forward * batch as f64
    }
}

/// Floating-point operations of one recurrent inference for one position (see
/// [`NetworkFlops`]).
pub fn recurrent_flops(spec: &NetworkSpec) -> f64 {
    NetworkFlops::of(spec).recurrent()
}

/// The measured rule: a call of `flops` floating-point operations in all (per position times
/// the batch) runs faster on a GPU than on the CPU above [`GPU_THRESHOLD_FLOPS`].
///
/// Measured on an H200 host with 16 CPU threads over MLPs of 64 to 512 units and the conv
/// ResNet of Connect Four at batches 1 to 4,096 (docs/benchmarks.md): 15 of the 16 networks and
/// batches fall on the side of the threshold that was faster. More CPU threads did not move
/// it: the networks' products are too small for many threads to share, and the 2-core
/// machine ran CartPole's network at batch 256 faster than the 16 threads of that host.
pub fn gpu_pays(flops: f64) -> bool {
    flops > GPU_THRESHOLD_FLOPS
}

/// The call size, in floating-point operations, above which a GPU is faster (see
/// [`gpu_pays`]): where a call's arithmetic on the CPU (about 10 to 35 GFLOP/s measured) takes
/// as long as the GPU's floor of launches and a device read (0.2 to 0.5 ms per call).
pub const GPU_THRESHOLD_FLOPS: f64 = 10e6;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::Support;

    fn spec(observation_shape: Vec<usize>, hidden: usize, blocks: usize) -> NetworkSpec {
        NetworkSpec {
            hidden_dim: hidden,
            latent_dim: 32,
            num_blocks: blocks,
            conv_channels: 64,
            value_support: Support::symmetric(2),
            ..crate::testing::specs::tiny_spec(observation_shape, 7)
        }
    }

    /// The conv count by hand for Connect Four's GPU preset (4 blocks of 64 channels on 6 x 7):
    /// 17 3x3 convolutions carry nearly all of it.
    #[test]
    fn the_conv_count_is_its_convolutions() {
        let s = spec(vec![3, 6, 7], 256, 4);
        let convs = 42.0 * 9.0 * 64.0 * (71.0 + 16.0 * 64.0);
        let flops = recurrent_flops(&s);
        assert!(flops > 2.0 * convs && flops < 2.0 * convs * 1.01, "{flops}");
    }

    /// More blocks, a wider trunk or a conv net each cost more, and a call's cost decides.
    #[test]
    fn bigger_networks_and_batches_tip_the_rule_to_the_gpu() {
        let small = recurrent_flops(&spec(vec![4], 64, 0));
        let wide = recurrent_flops(&spec(vec![4], 512, 2));
        let conv = recurrent_flops(&spec(vec![3, 6, 7], 256, 4));
        assert!(small < wide && wide < conv);
        // CartPole's network at 256 environments stays on the CPU, at 4,096 it goes to the
        // GPU; the conv net goes to the GPU from batch 1.
        assert!(!gpu_pays(small * 256.0));
        assert!(gpu_pays(small * 4096.0));
        assert!(gpu_pays(conv));
    }

    /// The representation's count by hand (the stem from 3 planes and 8 convolutions of 64
    /// channels), and a training step is three times its forward calls.
    #[test]
    fn a_training_step_counts_its_forward_calls_three_times() {
        let s = spec(vec![3, 6, 7], 256, 4);
        let f = NetworkFlops::of(&s);
        assert_eq!(
            f.representation,
            2.0 * 42.0 * 9.0 * 64.0 * (3.0 + 8.0 * 64.0)
        );
        let forward = f.representation + 5.0 * f.dynamics + 6.0 * f.prediction;
        assert_eq!(f.training_step(32, 5), 3.0 * 32.0 * forward);
        assert_eq!(f.recurrent(), recurrent_flops(&s));
        assert!(f.initial() < f.recurrent());
    }
}
