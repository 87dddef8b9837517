//! AdamW with a warm-up + cosine learning-rate schedule and global gradient-norm clipping.
//!
//! Written here rather than taken from `candle_nn::AdamW` because a checkpoint must hold the
//! optimizer's moments and step count, which candle's AdamW keeps private.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

use super::adamw_cpu;
use crate::network::NetworkError;

/// AdamW hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct AdamWConfig {
    pub learning_rate: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global L2 norm above which gradients are scaled down (0: off).
    pub max_grad_norm: f64,
}

/// Linear warm-up to the peak, then cosine decay to `final_fraction` of it at `total_steps`.
#[derive(Debug, Clone, PartialEq)]
pub struct LrSchedule {
    pub peak: f64,
    pub warmup_steps: usize,
    pub total_steps: usize,
    pub final_fraction: f64,
}

impl LrSchedule {
    pub fn at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if self.total_steps <= self.warmup_steps {
            return self.peak;
        }
        let progress = ((step - self.warmup_steps) as f64
            / (self.total_steps - self.warmup_steps) as f64)
            .min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.peak * (self.final_fraction + (1.0 - self.final_fraction) * cosine)
    }
}

/// AdamW over a fixed, ordered list of named parameters.
pub struct AdamW {
    config: AdamWConfig,
    names: Vec<String>,
    vars: Vec<Var>,
    moments: Moments,
    step: usize,
}

/// The first and second moments, kept in the layout the last update wanted.
enum Moments {
    /// One tensor per parameter: the CPU's in-place kernels, and tensor-op steps where some
    /// parameter has no gradient (it must not move).
    PerParameter { m: Vec<Tensor>, v: Vec<Tensor> },
    /// Every parameter's moments in one flat f32 vector each, in parameter order: a tensor-op
    /// step is then a handful of ops over the whole model instead of a set per parameter (each
    /// op is a kernel launch on a GPU).
    Flat { m: Tensor, v: Tensor },
}

impl Moments {
    /// The moments one tensor per parameter (splitting flat ones, each part its own storage).
    fn per_parameter(
        &mut self,
        vars: &[Var],
    ) -> candle_core::Result<(&mut [Tensor], &mut [Tensor])> {
        if let Moments::Flat { m, v } = self {
            let split = |flat: &Tensor| -> candle_core::Result<Vec<Tensor>> {
                let mut offset = 0;
                vars.iter()
                    .map(|var| {
                        let n = var.elem_count();
                        let part = flat.narrow(0, offset, n)?.reshape(var.shape())?.copy();
                        offset += n;
                        part
                    })
                    .collect()
            };
            *self = Moments::PerParameter {
                m: split(m)?,
                v: split(v)?,
            };
        }
        match self {
            Moments::PerParameter { m, v } => Ok((m, v)),
            Moments::Flat { .. } => unreachable!("converted above"),
        }
    }

    /// The moments as two flat vectors (joining per-parameter ones).
    fn flat(&mut self) -> candle_core::Result<(&mut Tensor, &mut Tensor)> {
        if let Moments::PerParameter { m, v } = self {
            let join = |parts: &[Tensor]| -> candle_core::Result<Tensor> {
                let flat = parts
                    .iter()
                    .map(|t| t.flatten_all())
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Tensor::cat(&flat, 0)
            };
            *self = Moments::Flat {
                m: join(m)?,
                v: join(v)?,
            };
        }
        match self {
            Moments::Flat { m, v } => Ok((m, v)),
            Moments::PerParameter { .. } => unreachable!("converted above"),
        }
    }
}

/// What one optimizer step did.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Global gradient norm before clipping: a scalar f32 tensor, left on the device so that
    /// it is read with the loss in one copy (`LossOutput::read`).
    pub grad_norm: Tensor,
    pub learning_rate: f64,
}

impl AdamW {
    pub fn new(named_vars: Vec<(String, Var)>, config: AdamWConfig) -> Result<Self, NetworkError> {
        let mut names = Vec::new();
        let mut vars = Vec::new();
        let mut first_moments = Vec::new();
        let mut second_moments = Vec::new();
        for (name, var) in named_vars {
            first_moments.push(var.zeros_like()?);
            second_moments.push(var.zeros_like()?);
            names.push(name);
            vars.push(var);
        }
        Ok(Self {
            config,
            names,
            vars,
            moments: Moments::PerParameter {
                m: first_moments,
                v: second_moments,
            },
            step: 0,
        })
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// The gradients of this optimizer's parameters, in parameter order (`None`: no gradient),
    /// detached: candle leaves a parameter's gradient holding the step's autograd graph, and
    /// whatever is computed from it would keep that graph alive (see `step_with_ops`).
    pub fn gradients(&self, grads: &GradStore) -> Vec<Option<Tensor>> {
        self.vars
            .iter()
            .map(|v| grads.get(v.as_tensor()).map(Tensor::detach))
            .collect()
    }

    /// Global L2 norm of `grads` (in parameter order; missing ones count 0), as a scalar f32
    /// tensor on the gradients' device: no host read.
    pub fn grad_norm(grads: &[Option<Tensor>]) -> Result<Tensor, NetworkError> {
        let squares = grads
            .iter()
            .flatten()
            .map(|g| g.to_dtype(candle_core::DType::F32)?.sqr()?.sum_all())
            .collect::<candle_core::Result<Vec<_>>>()?;
        if squares.is_empty() {
            return Err(NetworkError::Candle(candle_core::Error::Msg(
                "no gradients to take the norm of".into(),
            )));
        }
        Ok(Tensor::stack(&squares, 0)?.sum_all()?.sqrt()?)
    }

    /// One update with `learning_rate` from a backward pass, clipping by the global norm first.
    pub fn step(
        &mut self,
        grads: &GradStore,
        learning_rate: f64,
    ) -> Result<StepReport, NetworkError> {
        let grads = self.gradients(grads);
        self.step_with(&grads, learning_rate)
    }

    /// One update from gradients in parameter order (for example averaged over replicas).
    ///
    /// With every parameter and gradient f32 on the CPU, the update runs as in-place kernels
    /// (`adamw_cpu`); elsewhere (CUDA) as tensor ops that never wait for the device.
    pub fn step_with(
        &mut self,
        grads: &[Option<Tensor>],
        learning_rate: f64,
    ) -> Result<StepReport, NetworkError> {
        let on_cpu = self
            .vars
            .iter()
            .all(|v| adamw_cpu::on_cpu_f32(v.as_tensor()))
            && grads.iter().flatten().all(adamw_cpu::on_cpu_f32);
        if on_cpu {
            self.step_in_place(grads, learning_rate)
        } else {
            self.step_with_ops(grads, learning_rate)
        }
    }

    /// [`AdamW::step_with`] with in-place CPU kernels: the norm read from the gradients'
    /// storage, then three passes per parameter.
    fn step_in_place(
        &mut self,
        grads: &[Option<Tensor>],
        learning_rate: f64,
    ) -> Result<StepReport, NetworkError> {
        let grads: Vec<Option<Tensor>> = grads
            .iter()
            .map(|g| g.as_ref().map(|g| g.contiguous()).transpose())
            .collect::<candle_core::Result<_>>()?;
        if grads.iter().all(Option::is_none) {
            return Err(NetworkError::Candle(candle_core::Error::Msg(
                "no gradients to take the norm of".into(),
            )));
        }
        let mut squares = 0f64;
        for g in grads.iter().flatten() {
            squares += adamw_cpu::sum_of_squares(g)?;
        }
        let norm = squares.sqrt();
        let clip = if self.config.max_grad_norm > 0.0 {
            (self.config.max_grad_norm / (norm + 1e-6)).min(1.0)
        } else {
            1.0
        };
        self.step += 1;
        let c = &self.config;
        let t = self.step as f64;
        let update = adamw_cpu::ParameterUpdate {
            learning_rate: learning_rate as f32,
            weight_decay: c.weight_decay as f32,
            bias1: (1.0 - c.beta1.powf(t)) as f32,
            bias2: (1.0 - c.beta2.powf(t)) as f32,
            eps: c.eps as f32,
        };
        let (first_moments, second_moments) = self.moments.per_parameter(&self.vars)?;
        for (((var, m), v), g) in self
            .vars
            .iter()
            .zip(first_moments.iter())
            .zip(second_moments.iter())
            .zip(&grads)
        {
            let Some(g) = g else {
                continue;
            };
            let moment = |decay: f64, squared: bool| adamw_cpu::MomentUpdate {
                decay: decay as f32,
                clip: clip as f32,
                squared,
            };
            m.inplace_op2(g, &moment(c.beta1, false))?;
            v.inplace_op2(g, &moment(c.beta2, true))?;
            var.as_tensor().inplace_op3(m, v, &update)?;
        }
        Ok(StepReport {
            grad_norm: Tensor::new(norm as f32, &candle_core::Device::Cpu)?,
            learning_rate,
        })
    }

    /// [`AdamW::step_with`] written with tensor ops (any device, no host read): over flat
    /// vectors when every parameter has a gradient, per parameter otherwise.
    ///
    /// The gradients are detached first. candle's `backward` leaves a parameter's gradient
    /// tracking the ops that made it, so it holds the step's whole forward graph. Moments
    /// built from it with tensor ops would hold that graph too, and each step's moments the
    /// previous ones: every step's activations stayed alive. On an H200 that was 10.7 GB more
    /// GPU memory per training step of `agents/connect4_gpu.json`, until it ran out.
    fn step_with_ops(
        &mut self,
        grads: &[Option<Tensor>],
        learning_rate: f64,
    ) -> Result<StepReport, NetworkError> {
        let grads: Vec<Option<Tensor>> = grads
            .iter()
            .map(|g| g.as_ref().map(Tensor::detach))
            .collect();
        let grads = grads.as_slice();
        if !self.vars.is_empty() && grads.len() == self.vars.len() {
            if let Some(all) = grads.iter().cloned().collect::<Option<Vec<Tensor>>>() {
                return self.step_flat(&all, learning_rate);
            }
        }
        let grad_norm = Self::grad_norm(grads)?;
        // min(1, max_norm / (norm + 1e-6)) on the device: clipping needs no host read.
        let clip = if self.config.max_grad_norm > 0.0 {
            let limit = Tensor::full(self.config.max_grad_norm as f32, (), grad_norm.device())?;
            Some(limit.div(&(&grad_norm + 1e-6)?)?.minimum(1f32)?)
        } else {
            None
        };
        self.step += 1;
        let c = &self.config;
        let t = self.step as f64;
        let bias1 = 1.0 - c.beta1.powf(t);
        let bias2 = 1.0 - c.beta2.powf(t);
        let (first_moments, second_moments) = self.moments.per_parameter(&self.vars)?;
        for (((var, m), v), g) in self
            .vars
            .iter()
            .zip(first_moments.iter_mut())
            .zip(second_moments.iter_mut())
            .zip(grads)
        {
            let Some(g) = g else {
                continue;
            };
            let g = g.to_device(var.device())?;
            let g = match &clip {
                Some(c) => g.broadcast_mul(&c.to_device(var.device())?)?,
                None => g,
            };
            *m = ((&*m * c.beta1)? + (&g * (1.0 - c.beta1))?)?;
            *v = ((&*v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
            let m_hat = (&*m / bias1)?;
            let v_hat = (&*v / bias2)?;
            let decayed = (var.as_tensor() * (1.0 - learning_rate * c.weight_decay))?;
            let update = (m_hat / (v_hat.sqrt()? + c.eps)?)?;
            var.set(&(decayed - (update * learning_rate)?)?)?;
        }
        Ok(StepReport {
            grad_norm,
            learning_rate,
        })
    }

    /// [`AdamW::step_with_ops`] when every parameter has a gradient: the gradients joined into
    /// one vector, the norm, clipping and both moments as single ops over it, then one
    /// subtraction per parameter. Equal to the per-parameter update up to float rounding.
    fn step_flat(
        &mut self,
        grads: &[Tensor],
        learning_rate: f64,
    ) -> Result<StepReport, NetworkError> {
        let device = self.vars[0].device().clone();
        let pieces = grads
            .iter()
            .map(|g| {
                g.to_device(&device)?
                    .to_dtype(candle_core::DType::F32)?
                    .flatten_all()
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let g = Tensor::cat(&pieces, 0)?;
        let grad_norm = g.sqr()?.sum_all()?.sqrt()?;
        let g = if self.config.max_grad_norm > 0.0 {
            let limit = Tensor::full(self.config.max_grad_norm as f32, (), &device)?;
            let clip = limit.div(&(&grad_norm + 1e-6)?)?.minimum(1f32)?;
            g.broadcast_mul(&clip)?
        } else {
            g
        };
        self.step += 1;
        let c = self.config.clone();
        let t = self.step as f64;
        let (bias1, bias2) = (1.0 - c.beta1.powf(t), 1.0 - c.beta2.powf(t));
        let (m, v) = self.moments.flat()?;
        *m = ((&*m * c.beta1)? + (&g * (1.0 - c.beta1))?)?;
        *v = ((&*v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
        let update = (((&*m / bias1)? / ((&*v / bias2)?.sqrt()? + c.eps)?)? * learning_rate)?;
        let mut offset = 0;
        for var in &self.vars {
            let n = var.elem_count();
            let step = update.narrow(0, offset, n)?.reshape(var.shape())?;
            let decayed = (var.as_tensor() * (1.0 - learning_rate * c.weight_decay))?;
            var.set(&(decayed - step)?)?;
            offset += n;
        }
        Ok(StepReport {
            grad_norm,
            learning_rate,
        })
    }

    /// The optimizer state as named tensors (`m.<param>`, `v.<param>`) and the step count.
    pub fn state(&self) -> Result<(HashMap<String, Tensor>, usize), NetworkError> {
        let mut map = HashMap::new();
        let mut offset = 0;
        for (i, (name, var)) in self.names.iter().zip(&self.vars).enumerate() {
            let (m, v) = match &self.moments {
                Moments::PerParameter { m, v } => (m[i].clone(), v[i].clone()),
                Moments::Flat { m, v } => {
                    let n = var.elem_count();
                    let at = offset;
                    offset += n;
                    let part = |flat: &Tensor| flat.narrow(0, at, n)?.reshape(var.shape());
                    (part(m)?, part(v)?)
                }
            };
            map.insert(format!("m.{name}"), m);
            map.insert(format!("v.{name}"), v);
        }
        Ok((map, self.step))
    }

    /// Restore a state written by [`AdamW::state`]; every moment must be present with its shape.
    pub fn load_state(
        &mut self,
        mut state: HashMap<String, Tensor>,
        step: usize,
    ) -> Result<(), NetworkError> {
        let (first_moments, second_moments) = self.moments.per_parameter(&self.vars)?;
        for (i, name) in self.names.iter().enumerate() {
            for (prefix, slot) in [("m", &mut first_moments[i]), ("v", &mut second_moments[i])] {
                let key = format!("{prefix}.{name}");
                let t = state
                    .remove(&key)
                    .ok_or_else(|| NetworkError::MissingParameter(key.clone()))?;
                if t.dims() != slot.dims() {
                    return Err(NetworkError::ParameterShape {
                        name: key,
                        expected: slot.dims().to_vec(),
                        got: t.dims().to_vec(),
                    });
                }
                *slot = t
                    .to_dtype(candle_core::DType::F32)?
                    .to_device(slot.device())?;
            }
        }
        if let Some(extra) = state.keys().next() {
            return Err(NetworkError::UnexpectedParameter(extra.clone()));
        }
        self.step = step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_the_final_fraction() {
        let s = LrSchedule {
            peak: 1.0,
            warmup_steps: 10,
            total_steps: 110,
            final_fraction: 0.1,
        };
        assert!((s.at(0) - 0.1).abs() < 1e-12);
        assert!((s.at(9) - 1.0).abs() < 1e-12);
        assert!((s.at(10) - 1.0).abs() < 1e-12);
        assert!((s.at(60) - 0.55).abs() < 1e-9);
        assert!((s.at(110) - 0.1).abs() < 1e-12);
        assert!((s.at(1000) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn adamw_minimises_a_quadratic_and_clips() {
        let dev = candle_core::Device::Cpu;
        let x = Var::from_tensor(&Tensor::new(&[3f32, -2.0], &dev).unwrap()).unwrap();
        let mut opt = AdamW::new(
            vec![("x".into(), x.clone())],
            AdamWConfig {
                learning_rate: 0.1,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
                max_grad_norm: 1.0,
            },
        )
        .unwrap();
        for _ in 0..300 {
            let loss = x.as_tensor().sqr().unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            let report = opt.step(&grads, 0.1).unwrap();
            assert!(report.grad_norm.to_scalar::<f32>().unwrap().is_finite());
        }
        let v = x.as_tensor().to_vec1::<f32>().unwrap();
        assert!(v.iter().all(|x| x.abs() < 0.05), "{v:?}");
        assert_eq!(opt.step_count(), 300);
        let (state, step) = opt.state().unwrap();
        assert_eq!(step, 300);
        assert!(state.contains_key("m.x") && state.contains_key("v.x"));
    }

    /// The settings of the tests below, with their clipping norm.
    fn test_config(max_grad_norm: f64) -> AdamWConfig {
        AdamWConfig {
            learning_rate: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            max_grad_norm,
        }
    }

    /// The tensor-op update (CUDA's) keeps no autograd graph in its state: the moments of a
    /// step whose gradients came through an activation (so they track ops) are plain tensors,
    /// in the flat layout and per parameter (one parameter without a gradient).
    #[test]
    fn the_tensor_op_update_keeps_no_graph_in_its_moments() {
        let dev = candle_core::Device::Cpu;
        let config = test_config(1.0);
        for with_unused in [false, true] {
            let w = Var::from_tensor(&Tensor::new(&[0.5f32, -1.0, 2.0], &dev).unwrap()).unwrap();
            let u = Var::from_tensor(&Tensor::new(&[1.5f32, 0.25, -0.5], &dev).unwrap()).unwrap();
            let unused = Var::from_tensor(&Tensor::new(&[1f32], &dev).unwrap()).unwrap();
            let mut named = vec![("w".to_string(), w.clone()), ("u".to_string(), u.clone())];
            if with_unused {
                named.push(("unused".to_string(), unused.clone()));
            }
            let mut opt = AdamW::new(named, config.clone()).unwrap();
            for _ in 0..3 {
                // w's gradient is the activation `h`, which tracks ops back to `u`.
                let h = (u.as_tensor() * 2.0).unwrap().tanh().unwrap();
                let loss = (w.as_tensor() * &h).unwrap().sum_all().unwrap();
                let store = loss.backward().unwrap();
                let grads = opt.gradients(&store);
                assert!(grads.iter().flatten().all(|g| !g.track_op()));
                let raw: Vec<Option<Tensor>> = opt
                    .vars
                    .iter()
                    .map(|v| store.get(v.as_tensor()).cloned())
                    .collect();
                assert!(
                    raw[0].as_ref().unwrap().track_op(),
                    "the test needs a gradient that tracks ops"
                );
                opt.step_with_ops(&raw, 0.01).unwrap();
                let moments: Vec<&Tensor> = match &opt.moments {
                    Moments::Flat { m, v } => vec![m, v],
                    Moments::PerParameter { m, v } => m.iter().chain(v).collect(),
                };
                assert!(matches!(opt.moments, Moments::PerParameter { .. }) == with_unused);
                assert!(
                    moments.iter().all(|t| !t.track_op()),
                    "the moments hold an autograd graph (unused parameter: {with_unused})"
                );
            }
        }
    }

    #[test]
    fn the_in_place_cpu_update_equals_the_tensor_op_update() {
        let dev = candle_core::Device::Cpu;
        let config = test_config(0.5);
        let start = [
            Tensor::new(&[[0.5f32, -1.0, 2.0], [0.1, 0.0, -0.3]], &dev).unwrap(),
            Tensor::new(&[1.5f32, -0.25], &dev).unwrap(),
            Tensor::new(&[3.0f32], &dev).unwrap(),
        ];
        let make = || {
            let vars: Vec<Var> = start
                .iter()
                .map(|t| Var::from_tensor(&t.copy().unwrap()).unwrap())
                .collect();
            let named = vars
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("p{i}"), v.clone()))
                .collect();
            (vars, AdamW::new(named, config.clone()).unwrap())
        };
        let (in_place_vars, mut in_place) = make();
        let (op_vars, mut ops) = make();
        for step in 0..5 {
            // A transposed (non-contiguous) gradient, a missing one, and a norm above the clip.
            let grads = vec![
                Some(
                    Tensor::new(
                        &[[0.3f32, 1.0], [-2.0, 0.5], [0.7, -0.1 * step as f32]],
                        &dev,
                    )
                    .unwrap()
                    .t()
                    .unwrap(),
                ),
                if step % 2 == 0 {
                    Some(Tensor::new(&[-0.4f32, 0.9], &dev).unwrap())
                } else {
                    None
                },
                None,
            ];
            let a = in_place.step_in_place(&grads, 0.01).unwrap();
            let b = ops.step_with_ops(&grads, 0.01).unwrap();
            let (na, nb) = (
                a.grad_norm.to_scalar::<f32>().unwrap(),
                b.grad_norm.to_scalar::<f32>().unwrap(),
            );
            assert!((na - nb).abs() < 1e-5 * nb, "norm {na} vs {nb}");
        }
        let close = |x: &Tensor, y: &Tensor, what: &str| {
            let x = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let y = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for (a, b) in x.iter().zip(&y) {
                assert!(
                    (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                    "{what}: {x:?} vs {y:?}"
                );
            }
        };
        for (i, (a, b)) in in_place_vars.iter().zip(&op_vars).enumerate() {
            close(a.as_tensor(), b.as_tensor(), &format!("p{i}"));
        }
        // Parameters moved (the third never had a gradient and stays put).
        assert!(in_place_vars[0].as_tensor().to_vec2::<f32>().unwrap()[0][0] != 0.5);
        assert_eq!(
            in_place_vars[2].as_tensor().to_vec1::<f32>().unwrap(),
            vec![3.0]
        );
        let (sa, _) = in_place.state().unwrap();
        let (sb, _) = ops.state().unwrap();
        for (name, t) in &sa {
            close(t, &sb[name], name);
        }
        assert_eq!(in_place.step_count(), 5);
    }

    #[test]
    fn the_flat_tensor_op_update_equals_the_in_place_update_across_layout_changes() {
        let dev = candle_core::Device::Cpu;
        let config = test_config(0.5);
        let start = [
            Tensor::new(&[[0.5f32, -1.0, 2.0], [0.1, 0.0, -0.3]], &dev).unwrap(),
            Tensor::new(&[1.5f32, -0.25], &dev).unwrap(),
            Tensor::new(&[3.0f32], &dev).unwrap(),
        ];
        let make = || {
            let vars: Vec<Var> = start
                .iter()
                .map(|t| Var::from_tensor(&t.copy().unwrap()).unwrap())
                .collect();
            let named = vars
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("p{i}"), v.clone()))
                .collect();
            (vars, AdamW::new(named, config.clone()).unwrap())
        };
        let (in_place_vars, mut in_place) = make();
        let (op_vars, mut ops) = make();
        let mut flat_steps = 0;
        for step in 0..8 {
            let s = step as f32;
            // Every gradient present (the flat update), except at step 4 (per parameter).
            let grads = vec![
                Some(
                    Tensor::new(&[[0.3f32, 1.0], [-2.0, 0.5], [0.7, -0.1 * s]], &dev)
                        .unwrap()
                        .t()
                        .unwrap(),
                ),
                (step != 4).then(|| Tensor::new(&[-0.4f32, 0.9 - 0.2 * s], &dev).unwrap()),
                Some(Tensor::new(&[0.05f32 * s], &dev).unwrap()),
            ];
            let a = in_place.step_in_place(&grads, 0.01).unwrap();
            let b = ops.step_with_ops(&grads, 0.01).unwrap();
            if matches!(ops.moments, Moments::Flat { .. }) {
                flat_steps += 1;
            }
            let (na, nb) = (
                a.grad_norm.to_scalar::<f32>().unwrap(),
                b.grad_norm.to_scalar::<f32>().unwrap(),
            );
            assert!(
                (na - nb).abs() < 1e-5 * nb,
                "step {step}: norm {na} vs {nb}"
            );
        }
        assert_eq!(
            flat_steps, 7,
            "the flat update ran on every step with all gradients"
        );
        let values = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (i, (a, b)) in in_place_vars.iter().zip(&op_vars).enumerate() {
            for (x, y) in values(a.as_tensor()).iter().zip(values(b.as_tensor())) {
                assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "p{i}: {x} vs {y}");
            }
        }
        // The flat moments are saved per parameter, with the parameters' shapes.
        let (sa, _) = in_place.state().unwrap();
        let (sb, _) = ops.state().unwrap();
        assert_eq!(sa.len(), 6);
        for (name, t) in &sa {
            assert_eq!(t.dims(), sb[name].dims(), "{name}");
            for (x, y) in values(t).iter().zip(values(&sb[name])) {
                assert!(
                    (x - y).abs() <= 1e-6 * (1.0 + y.abs()),
                    "{name}: {x} vs {y}"
                );
            }
        }
        // And a saved state loads back into an optimizer whose moments are flat.
        ops.load_state(sa, 8).unwrap();
        assert!(matches!(ops.moments, Moments::PerParameter { .. }));
    }
}
