//! Parameter storage: every trainable tensor of a network, by name, in a fixed order.
//!
//! Parameters are f32 `Var`s initialised from a seeded RNG on the host (candle's own random
//! initialisers draw from an unseeded RNG, which would break "same seed, same run"). Names
//! follow the module tree (`prediction.value_head.weight`), so checkpoints are readable.

use std::collections::{BTreeMap, HashMap};

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Uniform};

use super::NetworkError;

/// An ordered set of named f32 parameters on one device.
#[derive(Clone)]
pub struct Params {
    vars: BTreeMap<String, Var>,
    device: Device,
}

impl Params {
    /// Parameter names in their fixed (sorted) order.
    pub fn names(&self) -> Vec<String> {
        self.vars.keys().cloned().collect()
    }

    /// The parameters, in name order.
    pub fn vars(&self) -> Vec<Var> {
        self.vars.values().cloned().collect()
    }

    /// Named parameters in name order.
    pub fn named(&self) -> impl Iterator<Item = (&String, &Var)> {
        self.vars.iter()
    }

    pub fn get(&self, name: &str) -> Option<&Var> {
        self.vars.get(name)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Number of scalar parameters.
    pub fn num_parameters(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    /// Detached copies of every parameter (for checkpoints and target networks).
    pub fn to_tensors(&self) -> Result<HashMap<String, Tensor>, NetworkError> {
        self.vars
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_tensor().detach().copy()?)))
            .collect()
    }

    /// Every parameter's tensor by name, sharing its storage (no copy): what the host paths
    /// read their weights from.
    pub fn tensors_by_name(&self) -> HashMap<String, Tensor> {
        self.vars
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect()
    }

    /// Overwrite every parameter with the values of `other` (same names and shapes).
    pub fn copy_from(&self, other: &Params) -> Result<(), NetworkError> {
        for (name, var) in &self.vars {
            let src = other
                .vars
                .get(name)
                .ok_or_else(|| NetworkError::MissingParameter(name.clone()))?;
            var.set(&src.as_tensor().to_device(&self.device)?)?;
        }
        Ok(())
    }

    /// Overwrite every parameter with the tensor of the same name in `tensors`.
    pub fn copy_from_tensors(&self, tensors: &HashMap<String, Tensor>) -> Result<(), NetworkError> {
        for (name, var) in &self.vars {
            let src = tensors
                .get(name)
                .ok_or_else(|| NetworkError::MissingParameter(name.clone()))?;
            var.set(&src.to_device(&self.device)?)?;
        }
        Ok(())
    }
}

/// Where a [`ParamBuilder`] takes values from.
enum Source {
    /// Fresh values from a seeded RNG.
    Random(Box<rand::rngs::StdRng>),
    /// Existing values (a checkpoint, another network).
    Tensors(HashMap<String, Tensor>),
    /// An inference copy of existing parameters: plain tensors (no gradient tracking) in the
    /// compute dtype, sharing storage with the variables when that dtype is f32.
    Frozen { params: Params, dtype: DType },
    /// A compute-dtype view of existing parameters for one training step: each weight cast
    /// once (a recorded op, so gradients flow back to the f32 variable) instead of per call.
    Cast { params: Params, dtype: DType },
}

/// Creates the parameters of a network as its modules are built.
pub struct ParamBuilder {
    prefix: Vec<String>,
    vars: BTreeMap<String, Var>,
    device: Device,
    source: Source,
    /// Normalisation scales and shifts stay f32 in the frozen and cast views (the norms
    /// compute in f32); see [`ParamBuilder::norm_constant`].
    keep_f32: bool,
}

impl ParamBuilder {
    /// Fresh parameters drawn from a generator seeded with `seed`.
    pub fn random(seed: u64, device: &Device) -> Self {
        Self {
            prefix: Vec::new(),
            vars: BTreeMap::new(),
            device: device.clone(),
            keep_f32: false,
            source: Source::Random(Box::new(rand::rngs::StdRng::seed_from_u64(seed))),
        }
    }

    /// Inference weights from `params`: detached (operations on them record no graph) and cast
    /// to `dtype` once, here, instead of on every call. With f32 they share the variables'
    /// storage, so later updates of `params` show through.
    pub fn frozen(params: &Params, dtype: DType) -> Self {
        Self {
            prefix: Vec::new(),
            vars: BTreeMap::new(),
            device: params.device.clone(),
            keep_f32: false,
            source: Source::Frozen {
                params: params.clone(),
                dtype,
            },
        }
    }

    /// Parameters taken from `tensors` (converted to f32 on `device`); every name the network
    /// asks for must be present with the right shape.
    /// Training weights from `params` in `dtype`, each cast once; gradients reach `params`.
    pub fn cast(params: &Params, dtype: DType) -> Self {
        Self {
            prefix: Vec::new(),
            vars: BTreeMap::new(),
            device: params.device.clone(),
            keep_f32: false,
            source: Source::Cast {
                params: params.clone(),
                dtype,
            },
        }
    }

    pub fn from_tensors(tensors: HashMap<String, Tensor>, device: &Device) -> Self {
        Self {
            prefix: Vec::new(),
            vars: BTreeMap::new(),
            device: device.clone(),
            keep_f32: false,
            source: Source::Tensors(tensors),
        }
    }

    /// Whether this builds an inference copy ([`ParamBuilder::frozen`]).
    pub fn is_frozen(&self) -> bool {
        matches!(self.source, Source::Frozen { .. })
    }

    /// The device the parameters live on (for a network's constant tensors).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Enter a sub-module: names created inside get `name.` prepended.
    pub fn push(&mut self, name: &str) {
        self.prefix.push(name.to_string());
    }

    pub fn pop(&mut self) {
        self.prefix.pop();
    }

    fn full_name(&self, name: &str) -> String {
        let mut parts = self.prefix.clone();
        parts.push(name.to_string());
        parts.join(".")
    }

    /// A parameter of `shape`; when fresh, uniform in [-bound, bound].
    pub fn uniform(
        &mut self,
        name: &str,
        shape: &[usize],
        bound: f32,
    ) -> Result<Tensor, NetworkError> {
        self.create(name, shape, |rng, n| {
            let dist = Uniform::new_inclusive(-bound, bound).expect("valid bound");
            (0..n).map(|_| dist.sample(rng)).collect()
        })
    }

    /// A parameter of `shape`; when fresh, every element equals `value`.
    /// [`ParamBuilder::constant`] for a normalisation's scale or shift: kept in f32 by the
    /// frozen and cast views, whatever their compute dtype.
    pub fn norm_constant(
        &mut self,
        name: &str,
        shape: &[usize],
        value: f32,
    ) -> Result<Tensor, NetworkError> {
        self.keep_f32 = true;
        let out = self.constant(name, shape, value);
        self.keep_f32 = false;
        out
    }

    pub fn constant(
        &mut self,
        name: &str,
        shape: &[usize],
        value: f32,
    ) -> Result<Tensor, NetworkError> {
        self.create(name, shape, |_, n| vec![value; n])
    }

    fn create(
        &mut self,
        name: &str,
        shape: &[usize],
        init: impl FnOnce(&mut rand::rngs::StdRng, usize) -> Vec<f32>,
    ) -> Result<Tensor, NetworkError> {
        let full = self.full_name(name);
        let n: usize = shape.iter().product();
        let tensor = match &mut self.source {
            Source::Random(rng) => {
                // Advance the generator identically whatever the values are used for.
                let _: u32 = rng.random();
                Tensor::from_vec(init(rng, n), shape, &self.device)?
            }
            Source::Tensors(map) => {
                let t = map
                    .remove(&full)
                    .ok_or_else(|| NetworkError::MissingParameter(full.clone()))?;
                if t.dims() != shape {
                    return Err(NetworkError::ParameterShape {
                        name: full,
                        expected: shape.to_vec(),
                        got: t.dims().to_vec(),
                    });
                }
                t.to_dtype(DType::F32)?.to_device(&self.device)?
            }
            Source::Frozen { params, dtype } => {
                let var = params
                    .get(&full)
                    .ok_or_else(|| NetworkError::MissingParameter(full.clone()))?;
                let dtype = if self.keep_f32 { DType::F32 } else { *dtype };
                return Ok(var.as_tensor().detach().to_dtype(dtype)?);
            }
            Source::Cast { params, dtype } => {
                let var = params
                    .get(&full)
                    .ok_or_else(|| NetworkError::MissingParameter(full.clone()))?;
                let dtype = if self.keep_f32 { DType::F32 } else { *dtype };
                return Ok(var.as_tensor().to_dtype(dtype)?);
            }
        };
        let var = Var::from_tensor(&tensor)?;
        let out = var.as_tensor().clone();
        self.vars.insert(full, var);
        Ok(out)
    }

    /// Finish: the parameter set. With `from_tensors`, a tensor the network did not ask for is
    /// an error (a checkpoint of another architecture).
    pub fn finish(self) -> Result<Params, NetworkError> {
        if let Source::Frozen { params, .. } | Source::Cast { params, .. } = self.source {
            return Ok(params);
        }
        if let Source::Tensors(map) = &self.source {
            if let Some(extra) = map.keys().next() {
                return Err(NetworkError::UnexpectedParameter(extra.clone()));
            }
        }
        Ok(Params {
            vars: self.vars,
            device: self.device,
        })
    }
}
