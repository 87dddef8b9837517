//! The learner: network, target network, optimizer and one training step on a batch; with
//! several devices, one replica of each per device (data parallelism).
//!
//! Data parallelism: the batch is split into equal slices, each replica computes the loss and
//! gradients of its slice (in its own thread), the gradients are averaged in-process (moved to
//! the first replica's device, summed, divided by N) and every replica applies the same update
//! with its own copy of the optimizer state, so the replicas stay identical.

use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};

use super::host_conv_loss::{self, HostConvValues};
use super::host_loss;
use super::loss::{unrolled_loss_with, LossOutput, LossValues, LossWeights};
use super::optimizer::{AdamW, AdamWConfig, LrSchedule};
use super::value_cache::{self, TargetValueCache};
use crate::distributed::Collective;
use crate::network::host_inference::HostInference;
use crate::network::host_mlp::HostMlp;
use crate::network::{MuZeroNetwork, NetworkError};
use crate::op_count::read_f32;
use crate::replay::Batch;

/// Where bootstrap values of the n-step targets come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueTarget {
    /// The search values stored with each game (MuZero's original choice).
    StoredRoot,
    /// A periodically refreshed copy of the network evaluated on the bootstrap observations.
    TargetNetwork,
}

/// Learner hyperparameters.
#[derive(Debug, Clone)]
pub struct LearnerConfig {
    pub optimizer: AdamWConfig,
    pub schedule: LrSchedule,
    pub value_loss_weight: f64,
    /// Weight of the consistency loss (needs a network with projection heads; 0: off).
    pub consistency_loss_weight: f64,
    pub target_update_frequency: usize,
    pub value_target: ValueTarget,
}

/// What one training step measured.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainStats {
    pub total_loss: f32,
    pub value_loss: f32,
    pub reward_loss: f32,
    pub policy_loss: f32,
    /// The consistency loss (negative cosine similarity; 0 when off).
    pub consistency_loss: f32,
    pub grad_norm: f64,
    pub learning_rate: f64,
    /// New replay priorities for the batch's positions.
    pub priorities: Vec<f32>,
}

/// `network` on the host, where [`HostMlp`] supports it.
fn host_copy(network: &MuZeroNetwork) -> Result<Option<HostMlp>, NetworkError> {
    if HostMlp::supports(network) {
        Ok(Some(HostMlp::new(network)?))
    } else {
        Ok(None)
    }
}

/// The network, target network and optimizer state on one device.
struct Replica {
    network: MuZeroNetwork,
    target: MuZeroNetwork,
    /// `target`'s inference copy (fused layer norms, no autograd graph), rebuilt whenever the
    /// target changes: it shares storage with `target` only in f32.
    target_inference: MuZeroNetwork,
    /// `target` on the host ([`HostMlp`]) where supported: the bootstrap values without
    /// tensors. Rebuilt with `target_inference`.
    target_host: Option<HostMlp>,
    /// The same for a conv `target` ([`HostConvValues`]).
    target_conv: Option<HostConvValues>,
    /// `target`'s bootstrap values by observation, emptied whenever the target changes.
    target_values: Mutex<TargetValueCache>,
    optimizer: AdamW,
}

impl Replica {
    fn new(network: MuZeroNetwork, config: &LearnerConfig) -> Result<Self, NetworkError> {
        let target = network.deep_copy(network.device())?;
        let named = network
            .params()
            .named()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let optimizer = AdamW::new(named, config.optimizer.clone())?;
        let target_inference = target.inference_copy()?;
        let target_host = host_copy(&target)?;
        let target_conv = HostConvValues::new(&target)?;
        Ok(Self {
            network,
            target,
            target_inference,
            target_host,
            target_conv,
            target_values: Mutex::new(TargetValueCache::new(value_cache::CACHE_BYTES)),
            optimizer,
        })
    }

    /// Rebuild the target's inference copy after the target changed.
    fn target_changed(&mut self) -> Result<(), NetworkError> {
        self.target_inference = self.target.inference_copy()?;
        self.target_host = host_copy(&self.target)?;
        self.target_conv = HostConvValues::new(&self.target)?;
        self.target_values
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    /// Value targets for `batch`: the stored ones, or re-bootstrapped with the target network.
    fn value_targets(&self, batch: &Batch, mode: ValueTarget) -> Result<Vec<f32>, NetworkError> {
        match mode {
            ValueTarget::StoredRoot => Ok(batch.target_values.clone()),
            ValueTarget::TargetNetwork => {
                // Only positions with a bootstrap term (a discount of 0 means the game ended
                // within n steps, or the row is padding) go through the target network.
                let rows = batch.bootstrap_discounts.len();
                let obs_len = batch.bootstrap_observations.len() / rows.max(1);
                let needed: Vec<usize> = (0..rows)
                    .filter(|&i| batch.bootstrap_discounts[i] != 0.0)
                    .collect();
                let mut values = vec![0f32; rows];
                if !needed.is_empty() {
                    let observations: Vec<f32> = needed
                        .iter()
                        .flat_map(|&i| {
                            batch.bootstrap_observations[i * obs_len..(i + 1) * obs_len]
                                .iter()
                                .copied()
                        })
                        .collect();
                    let pass = |observations: &[f32]| match &self.target_host {
                        Some(host) => {
                            let (_, out) = host.initial(observations);
                            let support = &self.target.spec().value_support;
                            Ok(support.logits_to_scalars(&out.value_logits))
                        }
                        None => match &self.target_conv {
                            Some(host) => host.values(observations),
                            None => self.target_inference.values(observations),
                        },
                    };
                    let computed = self
                        .target_values
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .values(&observations, obs_len, pass)?;
                    for (&i, v) in needed.iter().zip(computed) {
                        values[i] = v;
                    }
                }
                Ok(batch
                    .reward_sums
                    .iter()
                    .zip(&batch.bootstrap_discounts)
                    .zip(&values)
                    .map(|((sum, discount), v)| sum + discount * v)
                    .collect())
            }
        }
    }

    /// Loss and gradients (in parameter order) of `batch` on this replica: on host buffers
    /// where [`host_loss::supports`] or [`host_conv_loss::supports`] the network, otherwise
    /// with tensors and autograd.
    fn gradients(
        &self,
        batch: &Batch,
        config: &LearnerConfig,
    ) -> Result<ReplicaResult, NetworkError> {
        let targets = self.value_targets(batch, config.value_target)?;
        let consistency = config.consistency_loss_weight;
        let host = if host_loss::supports(&self.network, consistency) {
            Some(host_loss::host_unrolled_loss(
                &self.network,
                batch,
                &targets,
                config.value_loss_weight,
            )?)
        } else if host_conv_loss::supports(&self.network, consistency) {
            Some(host_conv_loss::host_conv_unrolled_loss(
                &self.network,
                batch,
                &targets,
                config.value_loss_weight,
            )?)
        } else {
            None
        };
        if let Some(host) = host {
            return Ok(ReplicaResult {
                grads: host.gradients,
                loss: ReplicaLoss::Host(host.values),
            });
        }
        let network = self.network.training_view()?;
        let loss = unrolled_loss_with(
            &network,
            batch,
            &targets,
            &LossWeights {
                value: config.value_loss_weight,
                consistency: config.consistency_loss_weight,
            },
        )?;
        let grads = loss.total.backward()?;
        Ok(ReplicaResult {
            grads: self.optimizer.gradients(&grads),
            loss: ReplicaLoss::Device(loss),
        })
    }
}

/// A replica's gradients and its loss (read after the update).
struct ReplicaResult {
    grads: Vec<Option<Tensor>>,
    loss: ReplicaLoss,
}

/// A replica's loss: still on its device, or already on the host.
enum ReplicaLoss {
    Device(LossOutput),
    Host(LossValues),
}

impl ReplicaLoss {
    /// The loss's values, with the scalar tensors `extra` read beside them.
    fn read(&self, network: &MuZeroNetwork, extra: &[&Tensor]) -> Result<LossValues, NetworkError> {
        match self {
            ReplicaLoss::Device(loss) => loss.read(network, extra),
            ReplicaLoss::Host(values) => {
                let mut values = values.clone();
                if !extra.is_empty() {
                    let pieces = extra
                        .iter()
                        .map(|t| t.to_dtype(DType::F32)?.reshape(1))
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    values.extra = read_f32(&Tensor::cat(&pieces, 0)?)?;
                }
                Ok(values)
            }
        }
    }
}

/// Owns the trainable network(s) and everything needed to update them.
pub struct Learner {
    replicas: Vec<Replica>,
    config: LearnerConfig,
    /// NCCL communicators when every replica is on its own GPU (feature `nccl`).
    #[cfg(feature = "nccl")]
    reducer: Option<super::nccl::NcclReducer>,
    /// The NCCL communicators span the GPUs of every rank, so their average is already the
    /// average over the ranks (feature `nccl`, every rank on GPUs).
    #[cfg(feature = "nccl")]
    nccl_spans_ranks: bool,
    /// The other processes' learners, when training over several ranks: gradients are
    /// averaged with theirs after the in-process average.
    collective: Option<Arc<dyn Collective>>,
    /// Seconds spent averaging gradients over the ranks (copies to and from the host, and
    /// waiting in the all-reduce for the slowest rank).
    rank_average_seconds: f64,
}

impl Learner {
    /// A learner on `network`'s device alone.
    pub fn new(network: MuZeroNetwork, config: LearnerConfig) -> Result<Self, NetworkError> {
        let device = network.device().clone();
        Self::with_devices(network, config, &[device])
    }

    /// One replica per device in `devices` (at least one), all starting from `network`'s
    /// parameters.
    pub fn with_devices(
        network: MuZeroNetwork,
        config: LearnerConfig,
        devices: &[Device],
    ) -> Result<Self, NetworkError> {
        let mut replicas = Vec::with_capacity(devices.len().max(1));
        for device in devices.iter().skip(1) {
            replicas.push(Replica::new(network.deep_copy(device)?, &config)?);
        }
        let primary = if devices
            .first()
            .is_some_and(|d| !d.same_device(network.device()))
        {
            network.deep_copy(&devices[0])?
        } else {
            network
        };
        replicas.insert(0, Replica::new(primary, &config)?);
        Ok(Self {
            replicas,
            config,
            #[cfg(feature = "nccl")]
            reducer: if devices.len() > 1 && devices.iter().all(Device::is_cuda) {
                Some(super::nccl::NcclReducer::new(devices)?)
            } else {
                None
            },
            #[cfg(feature = "nccl")]
            nccl_spans_ranks: false,
            collective: None,
            rank_average_seconds: 0.0,
        })
    }

    /// Seconds spent so far averaging gradients over the ranks (0 when training alone).
    pub fn rank_average_seconds(&self) -> f64 {
        self.rank_average_seconds
    }

    /// Train together with the learners of the other ranks of `collective`: every replica
    /// takes rank 0's parameters (online and target) now, and every step averages the
    /// gradients over the ranks. The optimizer states must already agree (fresh, or restored
    /// from the same checkpoint). Every rank must call this, and then `train_step` as often.
    pub fn set_collective(&mut self, collective: Arc<dyn Collective>) -> Result<(), NetworkError> {
        if collective.size() > 1 {
            // Rank 0's parameters into this rank's first replica (one broadcast per parameter,
            // the same on every rank whatever its number of replicas), then to the others.
            let (first, others) = self
                .replicas
                .split_first_mut()
                .expect("one replica at least");
            for net in [&first.network, &first.target] {
                for (_, var) in net.params().named() {
                    let t = var.as_tensor();
                    let mut flat = read_f32(t)?;
                    collective.broadcast_f32(&mut flat)?;
                    let from_rank_0 =
                        Tensor::from_vec(flat, t.shape(), t.device())?.to_dtype(t.dtype())?;
                    var.set(&from_rank_0)?;
                }
            }
            first.target_changed()?;
            for replica in others {
                replica.network.params().copy_from(first.network.params())?;
                replica.target.params().copy_from(first.target.params())?;
                replica.target_changed()?;
            }
            #[cfg(feature = "nccl")]
            self.span_ranks_with_nccl(collective.as_ref())?;
        }
        self.collective = Some(collective);
        Ok(())
    }

    /// Summed over the ranks, the largest difference between a rank's parameters and rank
    /// 0's (0 without other ranks): a check that the ranks stayed identical.
    pub fn max_difference_from_rank_0(&self) -> Result<f32, NetworkError> {
        let Some(collective) = self.collective.as_ref().filter(|c| c.size() > 1) else {
            return Ok(0.0);
        };
        let mut worst = 0f32;
        for (_, var) in self.network().params().named() {
            let mine = read_f32(var.as_tensor())?;
            let mut theirs = mine.clone();
            collective.broadcast_f32(&mut theirs)?;
            for (a, b) in mine.iter().zip(&theirs) {
                let d = (a - b).abs();
                // NaN on one rank only counts as a difference.
                if d > worst || (d.is_nan() && !(a.is_nan() && b.is_nan())) {
                    worst = if d.is_nan() { f32::INFINITY } else { d };
                }
            }
        }
        // The sum of every rank's largest difference: 0 exactly when all ranks equal rank 0.
        let mut all = [worst];
        collective.sum_f32(&mut all)?;
        Ok(all[0])
    }

    /// The (first replica's) network.
    pub fn network(&self) -> &MuZeroNetwork {
        &self.replicas[0].network
    }

    pub fn target_network(&self) -> &MuZeroNetwork {
        &self.replicas[0].target
    }

    /// Every replica's network, in device order.
    pub fn replica_networks(&self) -> Vec<&MuZeroNetwork> {
        self.replicas.iter().map(|r| &r.network).collect()
    }

    pub fn num_replicas(&self) -> usize {
        self.replicas.len()
    }

    pub fn optimizer(&self) -> &AdamW {
        &self.replicas[0].optimizer
    }

    /// Training steps taken so far.
    pub fn steps(&self) -> usize {
        self.replicas[0].optimizer.step_count()
    }

    pub fn device(&self) -> &Device {
        self.replicas[0].network.device()
    }

    /// Restore the target network and optimizer state of every replica (resume).
    pub fn restore(
        &mut self,
        target: &MuZeroNetwork,
        optimizer_state: std::collections::HashMap<String, Tensor>,
        optimizer_step: usize,
    ) -> Result<(), NetworkError> {
        for replica in &mut self.replicas {
            replica.target.params().copy_from(target.params())?;
            replica.target_changed()?;
            let state = optimizer_state
                .iter()
                .map(|(k, t)| Ok((k.clone(), t.to_device(replica.network.device())?)))
                .collect::<Result<_, candle_core::Error>>()?;
            replica.optimizer.load_state(state, optimizer_step)?;
        }
        Ok(())
    }

    /// Bootstrap observations whose target value came from the cache of values of the
    /// current target network, and all bootstrap observations looked up, since the learner
    /// was made (every replica).
    pub fn target_value_counts(&self) -> (u64, u64) {
        self.replicas.iter().fold((0, 0), |(hits, all), r| {
            let (h, a) = r
                .target_values
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .counts();
            (hits + h, all + a)
        })
    }

    /// Value targets for `batch` as the first replica computes them.
    pub fn value_targets(&self, batch: &Batch) -> Result<Vec<f32>, NetworkError> {
        self.replicas[0].value_targets(batch, self.config.value_target)
    }

    /// One optimisation step on `batch` (split evenly over the replicas).
    pub fn train_step(&mut self, batch: &Batch) -> Result<TrainStats, NetworkError> {
        let n = self.replicas.len();
        let results: Vec<ReplicaResult> = if n == 1 {
            vec![self.replicas[0].gradients(batch, &self.config)?]
        } else {
            let parts = batch.split(n).ok_or(NetworkError::BatchSplit {
                batch: batch.batch_size,
                replicas: n,
            })?;
            let config = &self.config;
            std::thread::scope(|scope| {
                let handles: Vec<_> = self
                    .replicas
                    .iter()
                    .zip(&parts)
                    .map(|(replica, part)| scope.spawn(move || replica.gradients(part, config)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("replica thread panicked"))
                    .collect::<Result<Vec<_>, _>>()
            })?
        };
        // An NCCL reduction over every rank's GPUs waits on the other ranks outside the MPI
        // exchanges (in the device read at the end of the step): under the same watchdog.
        match self.collective.clone().filter(|_| self.nccl_spans_ranks()) {
            Some(collective) => {
                let mut out = None;
                collective.watched("an NCCL reduction", &mut || {
                    out = Some(self.finish_step(&results));
                });
                out.expect("watched work runs")
            }
            None => self.finish_step(&results),
        }
    }

    /// The rest of a training step after the replicas' gradients: their average (on the
    /// devices, then over the ranks), the optimizer step, the target refresh and the step's
    /// one read of its results.
    fn finish_step(&mut self, results: &[ReplicaResult]) -> Result<TrainStats, NetworkError> {
        let n = self.replicas.len();
        let mut per_replica = match self.reduce_on_devices(results)? {
            Some(grads) => grads,
            None => vec![average_gradients(results, self.device())?; n],
        };
        if let Some(collective) = self
            .collective
            .as_ref()
            .filter(|c| c.size() > 1 && !self.nccl_spans_ranks())
        {
            let clock = std::time::Instant::now();
            per_replica = average_over_ranks(collective.as_ref(), &per_replica[0], &self.replicas)?;
            self.rank_average_seconds += clock.elapsed().as_secs_f64();
        }
        let lr = self.config.schedule.at(self.steps());
        let mut report = None;
        for (replica, grads) in self.replicas.iter_mut().zip(&per_replica) {
            report = Some(replica.optimizer.step_with(grads, lr)?);
        }
        let report = report.expect("at least one replica");
        if self
            .steps()
            .is_multiple_of(self.config.target_update_frequency)
        {
            self.refresh_target()?;
        }
        // The step's only read of its results: one copy per replica, the first with the norm.
        let mut values: Vec<LossValues> = Vec::with_capacity(n);
        for (i, (replica, result)) in self.replicas.iter().zip(results).enumerate() {
            let extra: Vec<&Tensor> = if i == 0 {
                vec![&report.grad_norm]
            } else {
                Vec::new()
            };
            values.push(result.loss.read(&replica.network, &extra)?);
        }
        let mean = |f: fn(&LossValues) -> f32| values.iter().map(f).sum::<f32>() / n as f32;
        Ok(TrainStats {
            total_loss: mean(|r| r.total),
            value_loss: mean(|r| r.value),
            reward_loss: mean(|r| r.reward),
            policy_loss: mean(|r| r.policy),
            consistency_loss: mean(|r| r.consistency),
            grad_norm: f64::from(values[0].extra[0]),
            learning_rate: report.learning_rate,
            priorities: values
                .iter()
                .flat_map(|r| r.priorities.iter().copied())
                .collect(),
        })
    }

    /// The replicas' gradients averaged by NCCL, one set per replica on its own GPU; `None`
    /// when NCCL is not in use (then the in-process average serves every replica).
    #[cfg(feature = "nccl")]
    fn reduce_on_devices(
        &self,
        results: &[ReplicaResult],
    ) -> Result<Option<Vec<Vec<Option<Tensor>>>>, NetworkError> {
        match &self.reducer {
            Some(reducer) => {
                let grads: Vec<Vec<Option<Tensor>>> =
                    results.iter().map(|r| r.grads.clone()).collect();
                Ok(Some(reducer.average(&grads)?))
            }
            None => Ok(None),
        }
    }

    /// Whether gradients are averaged over the ranks by one NCCL communicator spanning every
    /// rank's GPUs (feature `nccl`, every rank on CUDA), not on the host.
    pub fn nccl_spans_ranks(&self) -> bool {
        #[cfg(feature = "nccl")]
        return self.nccl_spans_ranks;
        #[cfg(not(feature = "nccl"))]
        false
    }

    /// With NCCL and GPUs on every rank: replace the in-process communicators by ones that
    /// span every rank's GPUs (all ranks decide together; otherwise the ranks average over
    /// `collective` on the host).
    #[cfg(feature = "nccl")]
    fn span_ranks_with_nccl(&mut self, collective: &dyn Collective) -> Result<(), NetworkError> {
        let devices: Vec<Device> = self
            .replicas
            .iter()
            .map(|r| r.network.device().clone())
            .collect();
        let mut all_cuda = [i64::from(devices.iter().all(Device::is_cuda))];
        collective.min_i64(&mut all_cuda)?;
        if all_cuda[0] == 1 {
            self.reducer = Some(super::nccl::NcclReducer::across_ranks(
                &devices, collective,
            )?);
            self.nccl_spans_ranks = true;
        }
        Ok(())
    }

    #[cfg(not(feature = "nccl"))]
    fn reduce_on_devices(
        &self,
        _results: &[ReplicaResult],
    ) -> Result<Option<Vec<Vec<Option<Tensor>>>>, NetworkError> {
        Ok(None)
    }

    /// Copy the online parameters into the target network (every replica).
    pub fn refresh_target(&mut self) -> Result<(), NetworkError> {
        for replica in &mut self.replicas {
            replica
                .target
                .params()
                .copy_from(replica.network.params())?;
            replica.target_changed()?;
        }
        Ok(())
    }
}

/// `grads` (this rank's in-process mean) averaged over the ranks of `collective`, in one
/// exchange of all parameters, then one copy per replica on its device.
fn average_over_ranks(
    collective: &dyn Collective,
    grads: &[Option<Tensor>],
    replicas: &[Replica],
) -> Result<Vec<Vec<Option<Tensor>>>, NetworkError> {
    // All gradients in one device-to-host read.
    let pieces = grads
        .iter()
        .flatten()
        .map(|g| g.flatten_all()?.to_dtype(DType::F32))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let mut flat = if pieces.is_empty() {
        Vec::new()
    } else {
        read_f32(&Tensor::cat(&pieces, 0)?)?
    };
    collective.average_f32(&mut flat)?;
    let mut out = Vec::with_capacity(replicas.len());
    for replica in replicas {
        let device = replica.network.device();
        let mut at = 0;
        let mut mine = Vec::with_capacity(grads.len());
        for g in grads {
            mine.push(match g {
                Some(g) => {
                    let n = g.elem_count();
                    let t = Tensor::from_slice(&flat[at..at + n], g.shape(), device)?
                        .to_dtype(g.dtype())?;
                    at += n;
                    Some(t)
                }
                None => None,
            });
        }
        out.push(mine);
    }
    Ok(out)
}

/// Mean of the replicas' gradients, parameter by parameter, on `device` (an in-process
/// all-reduce; with one replica, its gradients unchanged).
fn average_gradients(
    results: &[ReplicaResult],
    device: &Device,
) -> Result<Vec<Option<Tensor>>, NetworkError> {
    if results.len() == 1 {
        return Ok(results[0].grads.clone());
    }
    let n = results.len() as f64;
    let params = results[0].grads.len();
    let mut out = Vec::with_capacity(params);
    for j in 0..params {
        let mut sum: Option<Tensor> = None;
        for r in results {
            if let Some(g) = &r.grads[j] {
                let g = g.to_device(device)?;
                sum = Some(match sum {
                    None => g,
                    Some(s) => (s + g)?,
                });
            }
        }
        out.push(sum.map(|s| s / n).transpose()?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::GameHistory;
    use candle_core::DType;
    use rand::{Rng, SeedableRng};

    use crate::testing::learner::{config, network, replay, weights};

    fn train(replicas: usize, steps: usize) -> Learner {
        let mut learner = Learner::with_devices(
            network(),
            config(ValueTarget::TargetNetwork),
            &vec![Device::Cpu; replicas],
        )
        .unwrap();
        let replay = replay();
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for _ in 0..steps {
            let batch = replay.sample(12, &mut rng).unwrap();
            let stats = learner.train_step(&batch).unwrap();
            assert_eq!(stats.priorities.len(), 12);
            assert!(stats.total_loss.is_finite());
        }
        learner
    }

    #[test]
    fn replicas_stay_identical_and_match_one_replica_on_the_whole_batch() {
        let single = weights(train(1, 6).network());
        for n in [2, 3] {
            let learner = train(n, 6);
            assert_eq!(learner.num_replicas(), n);
            let nets = learner.replica_networks();
            let first = weights(nets[0]);
            for other in &nets[1..] {
                assert_eq!(weights(other), first, "replicas diverged (N = {n})");
            }
            let worst = first
                .iter()
                .zip(&single)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            // Same maths, different summation order: float rounding only.
            assert!(worst < 1e-4, "N = {n} differs from one replica by {worst}");
            assert_ne!(first, weights(&network()), "training changed nothing");
        }
    }

    /// A bf16 learner trains through the cast-once view: every f32 parameter moves, and the
    /// first steps agree with the f32 learner to bf16 precision.
    /// Two ranks (threads standing in for processes), each training on its half of the same
    /// batches and starting from different parameters, end bit-identical to each other and
    /// within float rounding of one learner on the whole batches.
    #[test]
    fn ranks_with_any_number_of_replicas_take_rank_0s_parameters_and_match_one_learner() {
        let steps = 6;
        let single = weights(train(1, steps).network());
        let handles: Vec<_> = crate::distributed::ThreadWorld::group(2)
            .into_iter()
            .map(|world| {
                std::thread::spawn(move || {
                    let rank = world.rank();
                    // Rank 1 starts elsewhere: set_collective must give it rank 0's weights.
                    let spec = crate::testing::specs::tiny_spec(vec![4], 2);
                    let start = if rank == 0 {
                        network()
                    } else {
                        MuZeroNetwork::new(spec, 99, &Device::Cpu, DType::F32).unwrap()
                    };
                    // Rank 0 has two replicas, rank 1 one: the ranks need not match.
                    let devices = vec![Device::Cpu; 2 - rank];
                    let mut learner =
                        Learner::with_devices(start, config(ValueTarget::TargetNetwork), &devices)
                            .unwrap();
                    learner.set_collective(Arc::new(world)).unwrap();
                    let replay = replay();
                    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
                    for _ in 0..steps {
                        let batch = replay.sample(12, &mut rng).unwrap();
                        let mine = batch.split(2).unwrap().swap_remove(rank);
                        learner.train_step(&mine).unwrap();
                    }
                    let difference = learner.max_difference_from_rank_0().unwrap();
                    (weights(learner.network()), difference)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results[0].0, results[1].0, "the ranks diverged");
        assert_eq!(results[0].1, 0.0);
        let worst = results[0]
            .0
            .iter()
            .zip(&single)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "two ranks differ from one learner by {worst}");
    }

    #[test]
    fn a_bf16_learner_updates_every_f32_parameter_through_the_cast_view() {
        let f32_net = network();
        let tensors = f32_net.params().to_tensors().unwrap();
        let spec = f32_net.spec().clone();
        let bf16_net =
            MuZeroNetwork::from_tensors(spec, tensors, &Device::Cpu, DType::BF16).unwrap();
        let before = weights(&bf16_net);
        let mut learner = Learner::new(bf16_net, config(ValueTarget::TargetNetwork)).unwrap();
        let mut reference = Learner::new(f32_net, config(ValueTarget::TargetNetwork)).unwrap();
        let replay = replay();
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        for _ in 0..3 {
            let batch = replay.sample(12, &mut rng).unwrap();
            let a = learner.train_step(&batch).unwrap();
            let b = reference.train_step(&batch).unwrap();
            assert!(
                (a.total_loss - b.total_loss).abs() < 0.05 * b.total_loss.abs().max(1.0),
                "bf16 {} vs f32 {}",
                a.total_loss,
                b.total_loss
            );
        }
        for (name, var) in learner.network().params().named() {
            assert_eq!(var.dtype(), DType::F32, "{name}");
        }
        let after = weights(learner.network());
        let offsets: Vec<(String, usize)> = learner
            .network()
            .params()
            .named()
            .scan(0, |at, (n, v)| {
                let start = *at;
                *at += v.elem_count();
                Some((n.clone(), start))
            })
            .collect();
        for (i, (name, start)) in offsets.iter().enumerate() {
            let end = offsets.get(i + 1).map_or(after.len(), |(_, s)| *s);
            assert_ne!(
                &after[*start..end],
                &before[*start..end],
                "{name} did not move"
            );
        }
    }

    #[test]
    fn a_batch_that_does_not_split_evenly_is_an_error() {
        let mut learner = Learner::with_devices(
            network(),
            config(ValueTarget::StoredRoot),
            &vec![Device::Cpu; 5],
        )
        .unwrap();
        let batch = replay()
            .sample(12, &mut rand::rngs::StdRng::seed_from_u64(1))
            .unwrap();
        let err = learner.train_step(&batch).unwrap_err().to_string();
        assert!(err.contains("12") && err.contains("5"), "{err}");
    }

    #[test]
    fn target_network_follows_on_schedule() {
        let learner = train(1, 2);
        assert_ne!(
            weights(learner.network()),
            weights(learner.target_network())
        );
        let learner = train(1, 3);
        assert_eq!(
            weights(learner.network()),
            weights(learner.target_network())
        );
    }

    #[test]
    fn bootstrap_values_skip_rows_without_a_bootstrap_term_and_agree_with_all_rows() {
        let learner = train(1, 2);
        let mut replay = replay();
        // Terminated games: positions within n steps of the end have no bootstrap term.
        let mut rng = rand::rngs::StdRng::seed_from_u64(21);
        for _ in 0..5 {
            let mut game = GameHistory::new(4, 2, &[0.3, 0.1, -0.2, 0.5], 0);
            for _ in 0..6 {
                let next: Vec<f32> = (0..4).map(|_| rng.random_range(-1.0..1.0)).collect();
                game.push(rng.random_range(0..2), 1.0, 1.0, &[0.5, 0.5], &next, 0);
            }
            game.finish(true, 0.0);
            replay.save_game(game).unwrap();
        }
        let batch = replay.sample(24, &mut rng).unwrap();
        let zero = batch
            .bootstrap_discounts
            .iter()
            .filter(|&&d| d == 0.0)
            .count();
        assert!(
            zero > 0 && zero < batch.bootstrap_discounts.len(),
            "{zero} zero discounts"
        );
        let all = learner
            .target_network()
            .values(&batch.bootstrap_observations)
            .unwrap();
        let got = learner.value_targets(&batch).unwrap();
        for i in 0..got.len() {
            let want = batch.reward_sums[i] + batch.bootstrap_discounts[i] * all[i];
            assert!(
                (got[i] - want).abs() < 1e-5,
                "row {i}: {} vs {want}",
                got[i]
            );
        }
    }
}
