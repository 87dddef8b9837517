//! Gymnasium environments from Python (the `python` feature): `gymnasium:ID` names, or any
//! Gymnasium environment object, behind the [`Environment`] trait.
//!
//! A [`GymnasiumEnv`] holds the Python environment and calls it through pyo3, taking the
//! interpreter's lock (the GIL) for each call, so environments of several threads take turns.
//! In the `cumind` binary the interpreter is embedded: it is started on first use, with the
//! site-packages of the virtual environment named by `VIRTUAL_ENV` (if any) added to its path.
//! In the Python package the interpreter is the one that imported CuMind.
//!
//! Spaces: the action space must be `Discrete` (its `start` is honoured); the observation
//! space `Box` (any dtype; observations are converted to `f32`, a scalar box becomes `[1]`) or
//! `Discrete` (observed as a one-hot vector). Anything else (`Dict`, `Tuple`, continuous
//! actions, `MultiDiscrete`, ...) is refused with [`EnvError::UnsupportedSpace`], naming the
//! space.
//!
//! A Python exception becomes [`EnvError::Python`] with its traceback. An exception in
//! `reset` (whose trait method cannot fail) is kept and returned by the next `step`.

use std::ffi::CStr;
use std::sync::Once;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyModule};

use crate::env::{EnvError, Environment, Info, Space};

use crate::registry::{Kwargs, GYMNASIUM_PREFIX};
/// The pyo3 this bridge is built with, for programs that call Python beside it.
pub use pyo3;

/// The Python side of the bridge: one call per reset or step, converting observations to
/// float32 bytes and keeping the numeric entries of `info`.
const HELPERS: &CStr = cr#"
import traceback

import numpy as np
from gymnasium import spaces


def _observation(obs):
    return np.ascontiguousarray(obs, dtype=np.float32).tobytes()


def _info(info):
    kept = {}
    for key, value in info.items():
        if isinstance(value, (bool, int, float, np.bool_, np.number)):
            kept[str(key)] = float(value)
    return kept


def describe(env):
    a, o = env.action_space, env.observation_space
    if not isinstance(a, spaces.Discrete):
        return f"the action space is {a!r}; CuMind needs a Discrete one"
    spec = getattr(env, "spec", None)
    steps = getattr(spec, "max_episode_steps", None) if spec is not None else None
    if isinstance(o, spaces.Box):
        shape = list(o.shape) or [1]
        low = np.broadcast_to(np.asarray(o.low, dtype=np.float32), o.shape)
        high = np.broadcast_to(np.asarray(o.high, dtype=np.float32), o.shape)
        return (int(a.n), int(a.start), "box", shape, _observation(low), _observation(high), 0, steps)
    if isinstance(o, spaces.Discrete):
        return (int(a.n), int(a.start), "discrete", [int(o.n)], b"", b"", int(o.start), steps)
    return (
        f"the observation space is {o!r}; CuMind needs a Box or a Discrete one "
        "(flatten a Dict or Tuple with gymnasium.wrappers.FlattenObservation)"
    )


def make(env_id, kwargs_json):
    import json

    import gymnasium

    return gymnasium.make(env_id, **json.loads(kwargs_json))


def reset(env, seed):
    obs, info = env.reset() if seed is None else env.reset(seed=seed)
    return _observation(obs), _info(info)


def step(env, action):
    obs, reward, terminated, truncated, info = env.step(action)
    return _observation(obs), float(reward), bool(terminated), bool(truncated), _info(info)


def copy(env):
    import copy

    return copy.deepcopy(env)


def format_exception(error, tb):
    return "".join(traceback.format_exception(type(error), error, tb or error.__traceback__))
"#;

/// Start the interpreter if this process has none yet (the `cumind` binary) and add the
/// site-packages of `VIRTUAL_ENV`, which an embedded interpreter does not read by itself.
fn ensure_python() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        Python::initialize();
        if let Ok(venv) = std::env::var("VIRTUAL_ENV") {
            Python::attach(|py| {
                let code = c"
import glob, os, site, sys
for d in sorted(glob.glob(os.path.join(os.environ['VIRTUAL_ENV'], 'lib', 'python%d.%d' % sys.version_info[:2], 'site-packages'))):
    site.addsitedir(d)
";
                if let Err(err) = py.run(code, None, None) {
                    eprintln!("warning: cannot add the site-packages of VIRTUAL_ENV={venv}: {err}");
                }
            });
        }
    });
}

/// The bridge's Python functions, compiled once per process.
fn helpers(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    static HELPERS_MODULE: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    let module = HELPERS_MODULE.get_or_try_init(py, || {
        PyModule::from_code(
            py,
            HELPERS,
            c"cumind_gymnasium_bridge.py",
            c"cumind_gymnasium_bridge",
        )
        .map(Bound::unbind)
    })?;
    Ok(module.bind(py).clone())
}

/// An exception as Python prints it, traceback included.
fn exception_text(py: Python<'_>, err: &PyErr) -> String {
    let formatted = helpers(py).and_then(|h| {
        h.getattr("format_exception")?
            .call1((err.value(py), err.traceback(py)))?
            .extract::<String>()
    });
    formatted.unwrap_or_else(|_| err.to_string())
}

/// How an observation of the Python environment becomes CuMind's flat `f32` vector.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Observation {
    /// A box: the values in row-major order.
    Box,
    /// A discrete value `start..start + n`: one-hot over `n`.
    OneHot { n: usize, start: i64 },
}

/// A Gymnasium environment living in Python (see the module docs).
pub struct GymnasiumEnv {
    name: String,
    env: Py<PyAny>,
    actions: usize,
    action_start: i64,
    observation: Observation,
    space: Space,
    max_episode_steps: Option<usize>,
    last_observation: Vec<f32>,
    over: bool,
    /// An exception raised by `reset`, reported by the next `step`.
    failure: Option<EnvError>,
}

impl std::fmt::Debug for GymnasiumEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GymnasiumEnv")
            .field("name", &self.name)
            .field("actions", &self.actions)
            .field("space", &self.space)
            .finish_non_exhaustive()
    }
}

impl GymnasiumEnv {
    /// `gymnasium.make(id, **kwargs)`, named `gymnasium:ID`.
    pub fn make(id: &str, kwargs: &Kwargs) -> Result<Self, EnvError> {
        ensure_python();
        let name = format!("{GYMNASIUM_PREFIX}{id}");
        let kwargs_json = serde_json::Value::Object(kwargs.clone()).to_string();
        let env = Python::attach(|py| {
            helpers(py)
                .and_then(|h| h.getattr("make")?.call1((id, kwargs_json)))
                .map(Bound::unbind)
                .map_err(|err| python_error(py, &name, "gymnasium.make", &err))
        })?;
        Self::from_object(name, env)
    }

    /// Wrap a Gymnasium environment object (reset here with seed 0, as the built-in ones).
    pub fn from_object(name: String, env: Py<PyAny>) -> Result<Self, EnvError> {
        ensure_python();
        type Described = (
            usize,
            i64,
            String,
            Vec<usize>,
            Vec<u8>,
            Vec<u8>,
            i64,
            Option<usize>,
        );
        let described = Python::attach(|py| {
            let out = helpers(py)
                .and_then(|h| h.getattr("describe")?.call1((env.bind(py),)))
                .map_err(|err| python_error(py, &name, "reading its spaces", &err))?;
            if let Ok(problem) = out.extract::<String>() {
                return Err(EnvError::UnsupportedSpace {
                    name: name.clone(),
                    problem,
                });
            }
            out.extract::<Described>()
                .map_err(|err| python_error(py, &name, "reading its spaces", &err))
        })?;
        let (actions, action_start, kind, shape, low, high, obs_start, max_episode_steps) =
            described;
        let (observation, space) = if kind == "discrete" {
            let n = shape[0];
            (
                Observation::OneHot {
                    n,
                    start: obs_start,
                },
                Space::uniform_box(0.0, 1.0, vec![n]),
            )
        } else {
            (
                Observation::Box,
                Space::Box {
                    low: floats(&low),
                    high: floats(&high),
                    shape,
                },
            )
        };
        if actions == 0 {
            return Err(EnvError::UnsupportedSpace {
                name,
                problem: "the action space has no actions".into(),
            });
        }
        let len = space.flat_len();
        let mut made = Self {
            name,
            env,
            actions,
            action_start,
            observation,
            space,
            max_episode_steps,
            last_observation: vec![0.0; len],
            over: false,
            failure: None,
        };
        made.reset(Some(0));
        if let Some(err) = made.failure.take() {
            return Err(err);
        }
        Ok(made)
    }

    /// The Python environment object.
    pub fn object(&self) -> &Py<PyAny> {
        &self.env
    }

    /// Observation bytes from Python as CuMind's flat vector.
    fn observation_of(&self, bytes: &[u8]) -> Result<Vec<f32>, String> {
        let values = floats(bytes);
        match self.observation {
            Observation::Box if values.len() == self.space.flat_len() => Ok(values),
            Observation::Box => Err(format!(
                "an observation of {} values, where the observation space holds {}",
                values.len(),
                self.space.flat_len()
            )),
            Observation::OneHot { n, start } => {
                let index = values.first().map(|v| *v as i64 - start);
                match index {
                    Some(i) if values.len() == 1 && (0..n as i64).contains(&i) => {
                        let mut one_hot = vec![0.0; n];
                        one_hot[i as usize] = 1.0;
                        Ok(one_hot)
                    }
                    _ => Err(format!(
                        "observation {values:?} outside its Discrete({n}) space"
                    )),
                }
            }
        }
    }

    /// [`GymnasiumEnv::observation_of`] the bytes `during` returned, a mismatch reported as
    /// that call's error.
    fn observation_in(
        &self,
        bytes: &Bound<'_, PyBytes>,
        during: &str,
    ) -> Result<Vec<f32>, EnvError> {
        self.observation_of(bytes.as_bytes())
            .map_err(|problem| EnvError::Python {
                name: self.name.clone(),
                during: during.into(),
                traceback: format!("{during} returned {problem}\n"),
            })
    }
}

fn python_error(py: Python<'_>, name: &str, during: &str, err: &PyErr) -> EnvError {
    let mut traceback = exception_text(py, err);
    if err.is_instance_of::<pyo3::exceptions::PyModuleNotFoundError>(py) {
        let prefix = py
            .import("sys")
            .and_then(|sys| sys.getattr("prefix")?.extract::<String>())
            .unwrap_or_default();
        traceback.push_str(&format!(
            "(CuMind runs the Python of {prefix}: install the module there, or activate a \
             virtual environment that has it before running cumind)\n"
        ));
    }
    EnvError::Python {
        name: name.to_string(),
        during: during.to_string(),
        traceback,
    }
}

/// Anything numpy turns into an array, as its float32 values in row-major order (the
/// conversion the bridge applies to observations).
pub fn float32_values(value: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    let bytes = helpers(value.py())?
        .getattr("_observation")?
        .call1((value,))?
        .cast_into::<PyBytes>()?;
    Ok(floats(bytes.as_bytes()))
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn info_of(dict: &Bound<'_, PyDict>) -> Info {
    dict.iter()
        .filter_map(|(k, v)| Some((k.extract::<String>().ok()?, v.extract::<f64>().ok()?)))
        .collect()
}

impl Environment for GymnasiumEnv {
    fn name(&self) -> &str {
        &self.name
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        let result = Python::attach(|py| {
            let (bytes, info) = helpers(py)
                .and_then(|h| h.getattr("reset")?.call1((self.env.bind(py), seed)))
                .and_then(|out| out.extract::<(Bound<'_, PyBytes>, Bound<'_, PyDict>)>())
                .map_err(|err| python_error(py, &self.name, "reset", &err))?;
            Ok::<_, EnvError>((self.observation_in(&bytes, "reset")?, info_of(&info)))
        });
        match result {
            Ok((observation, info)) => {
                self.failure = None;
                self.over = false;
                self.last_observation = observation.clone();
                (observation, info)
            }
            Err(err) => {
                self.failure = Some(err);
                (vec![0.0; self.space.flat_len()], Info::new())
            }
        }
    }

    fn step(&mut self, action: usize) -> Result<crate::StepResult, EnvError> {
        if let Some(err) = &self.failure {
            return Err(err.clone());
        }
        if action >= self.actions {
            return Err(EnvError::ActionOutOfRange {
                action,
                n: self.actions,
            });
        }
        if self.over {
            return Err(EnvError::EpisodeOver);
        }
        let python_action = self.action_start + action as i64;
        let (observation, reward, terminated, truncated, info) = Python::attach(|py| {
            type Stepped<'py> = (Bound<'py, PyBytes>, f64, bool, bool, Bound<'py, PyDict>);
            let out = helpers(py)
                .and_then(|h| h.getattr("step")?.call1((self.env.bind(py), python_action)))
                .map_err(|err| python_error(py, &self.name, "step", &err))?;
            let (bytes, reward, terminated, truncated, info) = out
                .extract::<Stepped<'_>>()
                .map_err(|err| python_error(py, &self.name, "step", &err))?;
            let observation = self.observation_in(&bytes, "step")?;
            Ok::<_, EnvError>((observation, reward, terminated, truncated, info_of(&info)))
        })?;
        self.over = terminated || truncated;
        self.last_observation = observation.clone();
        Ok(crate::StepResult {
            observation,
            reward,
            terminated,
            truncated,
            info,
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: self.actions }
    }

    fn observation_space(&self) -> Space {
        self.space.clone()
    }

    fn max_episode_steps(&self) -> Option<usize> {
        self.max_episode_steps
    }

    fn render(&self) -> String {
        format!(
            "{} (Python), observation {:?}",
            self.name, self.last_observation
        )
    }

    /// A `copy.deepcopy` of the Python environment. Where Python cannot copy it, the copy
    /// reports the exception at its first step.
    fn clone_box(&self) -> Box<dyn Environment> {
        Python::attach(|py| {
            let copied = helpers(py).and_then(|h| h.getattr("copy")?.call1((self.env.bind(py),)));
            let (env, failure) = match copied {
                Ok(env) => (env.unbind(), self.failure.clone()),
                Err(err) => (
                    self.env.clone_ref(py),
                    Some(python_error(py, &self.name, "copy.deepcopy", &err)),
                ),
            };
            Box::new(GymnasiumEnv {
                name: self.name.clone(),
                env,
                actions: self.actions,
                action_start: self.action_start,
                observation: self.observation,
                space: self.space.clone(),
                max_episode_steps: self.max_episode_steps,
                last_observation: self.last_observation.clone(),
                over: self.over,
                failure,
            }) as Box<dyn Environment>
        })
    }
}
