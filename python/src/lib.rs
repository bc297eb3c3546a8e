//! `sigbox._sigbox`: the native half of the `sigbox` Python package. The Python half
//! (`python/sigbox/__init__.py`) turns what this returns into typed objects.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sigbox::{ErrorKind, NewSignal, PassControl, Signal, SignalType, Target};
use sigbox_client::Checkpoint as Inner;

mod asks;

create_exception!(
    _sigbox,
    SigboxError,
    PyException,
    "Any sigbox error: `reason` (one line) and `path` (the file, or None)."
);
create_exception!(
    _sigbox,
    InvalidSignalError,
    SigboxError,
    "A signal, type, target or agent name sigbox refuses."
);
create_exception!(
    _sigbox,
    MailboxError,
    SigboxError,
    "The mailbox cannot be used: missing layout, a refused path, an I/O error."
);

/// How often a blocked wait looks for a pending KeyboardInterrupt (it sleeps on filesystem
/// events in between, so a signal wakes it at once).
const SLICE: Duration = Duration::from_millis(100);

fn error(py: Python<'_>, reason: String, path: Option<PathBuf>, invalid: bool) -> PyErr {
    let err = if invalid {
        InvalidSignalError::new_err(reason.clone())
    } else {
        MailboxError::new_err(reason.clone())
    };
    let value = err.value(py);
    let _ = value.setattr("reason", reason);
    let _ = value.setattr("path", path.map(|p| p.to_string_lossy().into_owned()));
    err
}

fn to_py(py: Python<'_>, e: sigbox::Error) -> PyErr {
    let invalid = matches!(e.kind(), ErrorKind::InvalidName | ErrorKind::InvalidSignal);
    error(py, e.to_string(), e.path().map(PathBuf::from), invalid)
}

/// A delivered signal as a dict: the Python side makes it a `Signal`.
fn signal_dict<'py>(py: Python<'py>, s: &Signal) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", &s.id)?;
    d.set_item("type", s.signal_type.as_str())?;
    d.set_item(
        "target",
        match &s.target {
            Target::All => Some("ALL".to_string()),
            Target::None => None,
            Target::Agent(a) => Some(a.clone()),
        },
    )?;
    d.set_item("message", &s.message)?;
    d.set_item("from", &s.from)?;
    d.set_item("iteration", s.iteration)?;
    d.set_item("created_at", s.created_at_rfc3339())?;
    d.set_item("redelivery", s.redelivery())?;
    d.set_item("path", s.acked_path().to_string_lossy().into_owned())?;
    d.set_item(
        "fields",
        serde_json::Value::Object(s.fields.clone()).to_string(),
    )?;
    Ok(d)
}

fn signals<'py>(py: Python<'py>, list: &[Signal]) -> PyResult<Vec<Bound<'py, PyDict>>> {
    list.iter().map(|s| signal_dict(py, s)).collect()
}

/// One agent's checkpoint handle; holds its presence while open.
#[pyclass(module = "sigbox._sigbox")]
struct Checkpoint {
    inner: Mutex<Option<Inner>>,
    /// Claimed and not returned: a wait interrupted by Ctrl-C keeps what it had here, and the
    /// next call returns it first. Never acknowledged before it is returned.
    stash: Mutex<Vec<Signal>>,
}

impl Checkpoint {
    fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Inner) -> sigbox::Result<T> + Send,
    ) -> PyResult<T>
    where
        T: Send,
    {
        let r = py.detach(|| {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            match g.as_mut() {
                Some(cp) => Ok(f(cp)),
                None => Err(()),
            }
        });
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(to_py(py, e)),
            Err(()) => Err(error(py, "the checkpoint is closed".into(), None, false)),
        }
    }

    /// Waits in slices, looking for KeyboardInterrupt between them; `stop` says when what was
    /// gathered is enough. Only the first slice acknowledges what earlier calls returned;
    /// later ones keep everything in flight, since nothing gathered is returned yet. An
    /// interrupt with signals in hand stashes them (the next call returns them) and raises.
    fn wait_until<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        stop: impl Fn(&[Signal]) -> bool,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let deadline = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Duration::try_from_secs_f64(t)
                .ok()
                .and_then(|d| Instant::now().checked_add(d)),
            Some(t) => {
                return Err(error(
                    py,
                    format!("timeout {t}: a number of seconds, 0 or more, or None"),
                    None,
                    true,
                ));
            }
        };
        if let Some(again) = self.unconfirmed(py)? {
            return Ok(again);
        }
        let mut got: Vec<Signal> = Vec::new();
        let mut first = true;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let slice = left.map_or(SLICE, |l| l.min(SLICE));
            let keep = !first;
            first = false;
            let batch = self.with(py, move |cp| {
                let mut control = PassControl::new();
                control.ack_later();
                if keep {
                    control.keep_handed();
                }
                cp.wait_with(Some(slice), &control, &mut |_| Ok(()))
            })?;
            got.extend(batch);
            if let Err(e) = py.check_signals() {
                // Claimed and not returned: kept for the next call, never lost.
                self.stash
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(got);
                return Err(e);
            }
            if stop(&got) || left.is_some_and(|l| l <= SLICE) {
                return self.hand(py, got);
            }
        }
    }

    fn take_stash(&self) -> Vec<Signal> {
        std::mem::take(&mut *self.stash.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// What an earlier call returned and the Python side never confirmed it received (an
    /// interrupt landed first), returned again; `None` when everything returned was received.
    fn unconfirmed<'py>(&self, py: Python<'py>) -> PyResult<Option<Vec<Bound<'py, PyDict>>>> {
        let held = self.stash.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if held.is_empty() {
            return Ok(None);
        }
        signals(py, &held).map(Some)
    }

    /// Returns `got`, keeping it until [`confirm`](Checkpoint::confirm) says the caller has it.
    fn hand<'py>(&self, py: Python<'py>, got: Vec<Signal>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let out = signals(py, &got)?;
        if !got.is_empty() {
            *self.stash.lock().unwrap_or_else(|e| e.into_inner()) = got;
        }
        Ok(out)
    }
}

#[pymethods]
impl Checkpoint {
    #[new]
    #[pyo3(signature = (root, agent, state=None))]
    fn new(py: Python<'_>, root: PathBuf, agent: &str, state: Option<String>) -> PyResult<Self> {
        let cp = py.detach(|| Inner::open(&root, agent));
        let mut cp = cp.map_err(|e| to_py(py, e))?;
        cp.state(state.as_deref());
        Ok(Checkpoint {
            inner: Mutex::new(Some(cp)),
            stash: Mutex::new(Vec::new()),
        })
    }

    /// One checkpoint pass: the delivered signals, oldest first.
    fn poll<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        if let Some(again) = self.unconfirmed(py)? {
            return Ok(again);
        }
        let got = self.with(py, |cp| cp.poll())?;
        self.hand(py, got)
    }

    /// Says the caller has what the last call returned; returns `received` (so that the
    /// Python side can confirm and return in one call, leaving no gap for an interrupt).
    fn confirm<'py>(&self, received: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        self.take_stash();
        received
    }

    /// Blocks (GIL released) until a signal is delivered or `timeout` seconds pass.
    #[pyo3(signature = (timeout=None))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.wait_until(py, timeout, |got| !got.is_empty())
    }

    /// The PAUSE handler: blocks until a RESUME, ABORT, STEER or INFO arrives (or `timeout`).
    #[pyo3(signature = (timeout=None))]
    fn wait_resume<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.wait_until(py, timeout, |got| {
            got.iter().any(|s| s.signal_type.ends_pause_wait())
        })
    }

    /// Acknowledges what was delivered (returned): never given again. Returns how many.
    /// What a Ctrl-C left stashed, not returned yet, stays in flight.
    fn ack(&self, py: Python<'_>) -> PyResult<usize> {
        if !self
            .stash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return Ok(0);
        }
        self.with(py, |cp| cp.ack())
    }

    /// Releases the presence; with `ack`, acknowledges what was delivered first.
    #[pyo3(signature = (ack=true))]
    fn close(&self, py: Python<'_>, ack: bool) -> PyResult<()> {
        let taken = py.detach(|| self.inner.lock().unwrap_or_else(|e| e.into_inner()).take());
        // Signals stashed and never returned are not acknowledged: given again, marked.
        let ack = ack && self.take_stash().is_empty();
        if let Some(cp) = taken {
            // Moved into the closure: a checkpoint is Send, not Sync.
            py.detach(move || if ack { cp.ack().map(|_| ()) } else { Ok(()) })
                .map_err(|e| to_py(py, e))?;
        }
        Ok(())
    }

    /// True while open.
    fn is_open(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

/// Sends a signal; returns its id. `target`: an agent, "ALL" (default), or "" for no target.
#[pyfunction]
#[pyo3(signature = (root, signal_type, message=None, target=None, sender=None, iteration=None))]
fn send(
    py: Python<'_>,
    root: PathBuf,
    signal_type: &str,
    message: Option<String>,
    target: Option<String>,
    sender: Option<String>,
    iteration: Option<i128>,
) -> PyResult<String> {
    let iteration = iteration
        .map(|i| {
            u64::try_from(i).map_err(|_| {
                error(
                    py,
                    format!("iteration {i}: a whole number from 0 to 2^64-1"),
                    None,
                    true,
                )
            })
        })
        .transpose()?;
    let ty = SignalType::parse(signal_type).ok_or_else(|| {
        error(
            py,
            format!(
                "unknown signal type {signal_type:?}: STEER, INFO, PAUSE, ABORT (or STOP), \
                 APPROVE, SKIP or RESUME"
            ),
            None,
            true,
        )
    })?;
    let target = match target.as_deref() {
        None => Target::All,
        Some("") => Target::None,
        Some(t) => Target::parse_sent(t).map_err(|e| error(py, e, None, true))?,
    };
    let mut s = NewSignal::new(ty);
    s.target(target);
    if let Some(m) = message {
        s.message(m);
    }
    if let Some(f) = sender {
        s.from(f);
    }
    if let Some(i) = iteration {
        s.iteration(i);
    }
    py.detach(|| sigbox::Mailbox::open(&root).and_then(|mb| mb.send(&s)))
        .map_err(|e| to_py(py, e))
}

/// Creates the mailbox layout at `root` (idempotent).
#[pyfunction]
fn init(py: Python<'_>, root: PathBuf) -> PyResult<()> {
    py.detach(|| sigbox::Mailbox::init(&root).map(|_| ()))
        .map_err(|e| to_py(py, e))
}

#[pymodule]
fn _sigbox(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Checkpoint>()?;
    m.add_function(wrap_pyfunction!(send, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(asks::ask, m)?)?;
    m.add_function(wrap_pyfunction!(asks::answer, m)?)?;
    m.add("SigboxError", py.get_type::<SigboxError>())?;
    m.add("InvalidSignalError", py.get_type::<InvalidSignalError>())?;
    m.add("MailboxError", py.get_type::<MailboxError>())?;
    Ok(())
}
