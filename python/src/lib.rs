//! `cumind._cumind`: the native half of the `cumind` Python package (the Python half is
//! `python/cumind/__init__.py`, which documents the API).
//!
//! - [`Agent`]: a trained agent loaded from a checkpoint, acting on numpy observations.
//! - [`train`]: a training run as `cumind train` makes it, on a configuration given as a dict
//!   or a file, on a built-in environment, a Gymnasium id, or a Gymnasium environment object.
//! - [`connect_four_move`]: the move of one of the arena's Connect Four opponents (`random`,
//!   `alphabeta:DEPTH`, `perfect`), so programs outside CuMind meet the same opponents.
//!
//! The search and the training run with the interpreter's lock released; a Gymnasium
//! environment takes it for each reset and step.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use cumind::arena::{connect_four, OpponentSpec};
use cumind::config::{Config, ConfigSources};
use cumind_envs::gymnasium::{float32_values, GymnasiumEnv};
use cumind_envs::{Environment, GYMNASIUM_PREFIX};

fn runtime_error(err: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(err.to_string())
}

fn value_error(err: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(err.to_string())
}

/// The rows in `array` (anything numpy turns into an array) as float32, each of `shape`:
/// `(rows, values)`; `what` names the rows in the error.
fn float_rows(
    array: &Bound<'_, PyAny>,
    shape: &[usize],
    what: &str,
) -> PyResult<(usize, Vec<f32>)> {
    let row_len: usize = shape.iter().product();
    let values = float32_values(array)?;
    if row_len == 0 || !values.len().is_multiple_of(row_len) {
        return Err(value_error(format!(
            "{} values do not make {what} of shape {shape:?} ({row_len} values each)",
            values.len()
        )));
    }
    Ok((values.len() / row_len, values))
}

fn open_device(device: &str) -> PyResult<Device> {
    match device {
        "cpu" => Ok(Device::Cpu),
        other => Err(value_error(format!(
            "device {other:?}: this build of the cumind package runs on the CPU only (\"cpu\"); \
             GPUs need the `cumind` command built with the `cuda` feature"
        ))),
    }
}

/// A trained agent: its networks and search, loaded from a checkpoint.
#[pyclass(module = "cumind._cumind")]
struct Agent {
    inner: std::sync::Mutex<cumind::agent::Agent>,
    num_actions: usize,
    observation_shape: Vec<usize>,
}

impl Agent {
    fn agent(&self) -> std::sync::MutexGuard<'_, cumind::agent::Agent> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn row_len(&self) -> usize {
        self.observation_shape.iter().product()
    }
}

#[pymethods]
impl Agent {
    /// Load the latest checkpoint of a run directory (or a `step-*` directory).
    #[staticmethod]
    #[pyo3(signature = (path, device = "cpu"))]
    fn load(py: Python<'_>, path: PathBuf, device: &str) -> PyResult<Self> {
        let device = open_device(device)?;
        let agent = py
            .detach(|| cumind::agent::Agent::load_on(&path, &device))
            .map_err(|e| {
                value_error(format!("cannot load an agent from {}: {e}", path.display()))
            })?;
        Ok(Self {
            num_actions: agent.num_actions(),
            observation_shape: agent.observation_shape().to_vec(),
            inner: std::sync::Mutex::new(agent),
        })
    }

    /// One greedy action (a search from `observation`), among `legal_actions` if given.
    #[pyo3(signature = (observation, legal_actions = None))]
    fn select_action(
        &self,
        py: Python<'_>,
        observation: &Bound<'_, PyAny>,
        legal_actions: Option<Vec<usize>>,
    ) -> PyResult<usize> {
        let (rows, values) = float_rows(observation, &self.observation_shape, "observations")?;
        if rows != 1 {
            return Err(value_error(format!(
                "one observation of shape {:?} expected, got {} values (use select_actions for a batch)",
                self.observation_shape,
                values.len()
            )));
        }
        let mut mask = vec![legal_actions.is_none(); self.num_actions];
        for a in legal_actions.unwrap_or_default() {
            if a >= self.num_actions {
                return Err(value_error(format!(
                    "legal action {a} is out of range: the agent has {} actions",
                    self.num_actions
                )));
            }
            mask[a] = true;
        }
        let actions = py
            .detach(|| {
                self.agent()
                    .select_actions_masked(&[&values], &[&mask], false)
            })
            .map_err(value_error)?;
        Ok(actions[0])
    }

    /// Greedy actions for a batch of observations (shape `[B, *observation_shape]`), searched
    /// together; `legal_mask` (shape `[B, num_actions]`, true where legal) if given.
    #[pyo3(signature = (observations, legal_mask = None))]
    fn select_actions<'py>(
        &self,
        py: Python<'py>,
        observations: &Bound<'py, PyAny>,
        legal_mask: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let row = self.row_len();
        let (rows, values) = float_rows(observations, &self.observation_shape, "observations")?;
        let masks: Vec<Vec<bool>> = match legal_mask {
            None => vec![vec![true; self.num_actions]; rows],
            Some(mask) => {
                let (mask_rows, flat) =
                    float_rows(mask, &[self.num_actions], "legal-action masks")?;
                if mask_rows != rows {
                    return Err(value_error(format!(
                        "{mask_rows} legal-action masks for {rows} observations"
                    )));
                }
                flat.chunks(self.num_actions)
                    .map(|m| m.iter().map(|&v| v != 0.0).collect())
                    .collect()
            }
        };
        let observations: Vec<&[f32]> = values.chunks(row).collect();
        let masks: Vec<&[bool]> = masks.iter().map(Vec::as_slice).collect();
        let actions = py
            .detach(|| {
                self.agent()
                    .select_actions_masked(&observations, &masks, false)
            })
            .map_err(value_error)?;
        let list = PyList::new(py, actions.iter().map(|&a| a as i64))?;
        py.import("numpy")?.call_method1("asarray", (list, "int64"))
    }

    /// The number of actions.
    #[getter]
    fn num_actions(&self) -> usize {
        self.num_actions
    }

    /// The shape of one observation.
    #[getter]
    fn observation_shape(&self) -> Vec<usize> {
        self.observation_shape.clone()
    }

    /// The configuration the agent was trained with, as JSON text.
    fn config_json(&self) -> String {
        self.agent().config().to_json()
    }

    fn __repr__(&self) -> String {
        let agent = self.agent();
        format!(
            "Agent(env={:?}, actions={}, observation_shape={:?})",
            agent.config().environment.env_name,
            self.num_actions,
            self.observation_shape
        )
    }
}

/// The environment name a training run gets for `env`: a string is a CuMind name (built-in,
/// registered or `gymnasium:ID`) or else a Gymnasium id; an object is registered under
/// `gymnasium:<its spec id or class name>`, each copy a `copy.deepcopy` of it.
fn environment_name(env: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(name) = env.extract::<String>() {
        let known = cumind_envs::all_names().contains(&name);
        return Ok(if known || name.starts_with(GYMNASIUM_PREFIX) {
            name
        } else {
            format!("{GYMNASIUM_PREFIX}{name}")
        });
    }
    let spec = env.getattr("spec").ok().filter(|s| !s.is_none());
    let label = match spec.and_then(|s| s.getattr("id").ok()) {
        Some(id) => id.extract::<String>()?,
        None => env.get_type().name()?.to_string(),
    };
    let name = format!("{GYMNASIUM_PREFIX}{label}");
    let prototype =
        GymnasiumEnv::from_object(name.clone(), env.clone().unbind()).map_err(value_error)?;
    cumind_envs::register(&name, move || prototype.clone_box()).map_err(value_error)?;
    Ok(name)
}

/// Train as `cumind train` does; returns the run's checkpoint directory (see the Python
/// docstring of `cumind.train`).
#[pyfunction]
#[pyo3(signature = (config = None, env = None, *, sets = None, seed = None, progress = true))]
fn train(
    py: Python<'_>,
    config: Option<&Bound<'_, PyAny>>,
    env: Option<&Bound<'_, PyAny>>,
    sets: Option<Vec<String>>,
    seed: Option<u64>,
    progress: bool,
) -> PyResult<String> {
    let mut sources = ConfigSources::default();
    match config {
        None => {}
        Some(c) if c.is_instance_of::<PyDict>() => {
            let text: String = py.import("json")?.call_method1("dumps", (c,))?.extract()?;
            sources.text = Some(("the configuration given to cumind.train".into(), text));
        }
        Some(c) => {
            let path: PathBuf = c.extract().map_err(|_| {
                value_error("config must be a dict or the path of a JSON configuration file")
            })?;
            sources.files.push(path);
        }
    }
    let mut sets = sets.unwrap_or_default();
    if let Some(env) = env {
        let name = environment_name(env)?;
        sets.push(format!(
            "environment.env_name={}",
            serde_json::Value::String(name)
        ));
    }
    if let Some(seed) = seed {
        sets.push(format!("other.seed={seed}"));
    }
    sources.sets = sets;
    let config =
        Config::load(&sources).map_err(|e| value_error(format!("invalid configuration: {e}")))?;

    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("cumind-train".into())
            .spawn(move || cumind_cli::cli::train_config(&config, stop, progress))
            .map_err(runtime_error)?
    };
    // Wait with the interpreter's lock released (the run's Gymnasium environments take it),
    // looking at Python's signals between waits: the first Ctrl-C stops the run after its
    // current step with a checkpoint, as on the command line; a second one raises here.
    let mut interrupted = false;
    while !worker.is_finished() {
        py.detach(|| std::thread::sleep(Duration::from_millis(50)));
        if let Err(err) = py.check_signals() {
            if !err.is_instance_of::<PyKeyboardInterrupt>(py) {
                return Err(err);
            }
            if interrupted {
                return Err(PyKeyboardInterrupt::new_err(
                    "second interrupt: not waiting for the run; its last complete checkpoint stays the latest",
                ));
            }
            interrupted = true;
            stop.store(true, Ordering::SeqCst);
            eprintln!(
                "interrupt: finishing the current step and saving a checkpoint (interrupt again \
                 to stop waiting)"
            );
        }
    }
    let result = worker
        .join()
        .map_err(|_| runtime_error("the training thread panicked"))?;
    let run_dir = result.map_err(|e| runtime_error(format!("{e:#}")))?;
    Ok(run_dir.display().to_string())
}

/// Rows and columns of the Connect Four board.
const C4_ROWS: usize = 6;
const C4_COLUMNS: usize = 7;

/// The move the Connect Four opponent `opponent` (written as `cumind eval --opponent` takes
/// it: `random`, `alphabeta:DEPTH` or `perfect`) makes in the position `observation` (the
/// environment's `[3, 6, 7]` planes: the mover's stones, the opponent's, the to-play plane;
/// row 0 at the top), choosing among equally good moves with a generator seeded by `seed`
/// (fresh entropy without one).
#[pyfunction]
#[pyo3(signature = (observation, opponent, seed = None))]
fn connect_four_move(
    py: Python<'_>,
    observation: &Bound<'_, PyAny>,
    opponent: &str,
    seed: Option<u64>,
) -> PyResult<usize> {
    let plane = C4_ROWS * C4_COLUMNS;
    let values = float32_values(observation)?;
    let board = connect_four::Board::from_observation(&values, &[3, C4_ROWS, C4_COLUMNS])
        .ok_or_else(|| {
            value_error(format!(
                "a Connect Four observation has 3 x {C4_ROWS} x {C4_COLUMNS} = {} values (the \
                 mover's stones, the opponent's, the to-play plane; row 0 at the top), got {}",
                3 * plane,
                values.len()
            ))
        })?;
    let occupied = |row: usize, column: usize| {
        let i = row * C4_COLUMNS + column;
        values[i] > 0.5 || values[plane + i] > 0.5
    };
    for column in 0..C4_COLUMNS {
        for row in 1..C4_ROWS {
            if occupied(row - 1, column) && !occupied(row, column) {
                return Err(value_error(format!(
                    "not a Connect Four position: column {column} has a stone in row {} above \
                     the empty cell of row {row} (row 0 is the top)",
                    row - 1
                )));
            }
        }
    }
    let legal: Vec<usize> = (0..C4_COLUMNS).filter(|&c| !occupied(0, c)).collect();
    if legal.is_empty() {
        return Err(value_error("the board is full: no column is left to play"));
    }
    let spec: OpponentSpec = opponent.parse().map_err(value_error)?;
    let mut rng = match seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_os_rng(),
    };
    // The arena's own players (`Opponent::choose` plays these on Connect Four).
    match spec {
        OpponentSpec::Random => Ok(legal[rng.random_range(0..legal.len())]),
        OpponentSpec::AlphaBeta(depth) => {
            Ok(py.detach(|| connect_four::alphabeta_move(&board, depth, &mut rng)))
        }
        OpponentSpec::Perfect => py
            .detach(|| connect_four::perfect_move(&board, &mut rng))
            .map_err(value_error),
        OpponentSpec::Checkpoint(_) | OpponentSpec::All => Err(value_error(format!(
            "opponent {opponent:?}: connect_four_move plays random, alphabeta:DEPTH or perfect \
             (a checkpoint is an agent: load it with cumind.Agent.load; `all` is an audit, not \
             a player)"
        ))),
    }
}

/// The version and the features of this build.
#[pyfunction]
fn version() -> String {
    cumind::build_info::version_line()
}

#[pymodule]
fn _cumind(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Agent>()?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(connect_four_move, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
