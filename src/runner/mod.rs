//! Running test programs: the conformance files' `@main` (or, in files without one, every
//! argument-less function), with their `check` ops evaluated on the host after one execution
//! on the device. Used by `wgpu-hlo run` and `wgpu-hlo conformance`.

pub mod compare;
pub mod conformance;

use std::path::Path;
use std::sync::Arc;

use crate::compile::{compile_function, CompileOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::frontend::{bytecode, hlo_proto, text};
use crate::ir::{Module, Type};
use crate::passes::{self, checks};
use crate::runtime::Device;

/// How one file (or one function) went. Ordered by severity for combining.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Every check passed.
    Pass,
    /// Something the compiler or this adapter does not support.
    Unsupported,
    /// A bad program, an internal error, a crash or a timeout.
    Error,
    /// A check failed.
    Fail,
}

impl Outcome {
    /// Lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "passed",
            Outcome::Unsupported => "unsupported",
            Outcome::Error => "error",
            Outcome::Fail => "failed",
        }
    }

    /// Parses [`Outcome::name`].
    pub fn from_name(s: &str) -> Option<Outcome> {
        Some(match s {
            "passed" => Outcome::Pass,
            "unsupported" => Outcome::Unsupported,
            "error" => Outcome::Error,
            "failed" => Outcome::Fail,
            _ => return None,
        })
    }

    /// The outcome of an error.
    pub fn of_error(e: &Error) -> Outcome {
        match e.kind {
            ErrorKind::Unimplemented => Outcome::Unsupported,
            _ => Outcome::Error,
        }
    }
}

/// The result of running one file.
#[derive(Clone, Debug)]
pub struct FileReport {
    /// Combined outcome (the most severe of its functions).
    pub outcome: Outcome,
    /// One line per failed check or error; empty when everything passed.
    pub lines: Vec<String>,
    /// Checks evaluated and checks passed.
    pub checks: (usize, usize),
    /// Functions run.
    pub functions: usize,
}

impl FileReport {
    fn new() -> FileReport {
        FileReport {
            outcome: Outcome::Pass,
            lines: Vec::new(),
            checks: (0, 0),
            functions: 0,
        }
    }

    fn add(&mut self, outcome: Outcome, line: String) {
        self.outcome = self.outcome.max(outcome);
        self.lines.push(line);
    }

    /// The first line explaining a non-pass, for one-line summaries.
    pub fn reason(&self) -> String {
        self.lines.first().cloned().unwrap_or_default()
    }
}

/// Options of a run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Dump directory for every compiled function.
    pub dump_dir: Option<std::path::PathBuf>,
}

/// Reads and runs one file.
pub fn run_file(device: &Arc<Device>, path: &Path, options: &RunOptions) -> FileReport {
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => run_bytes(device, &bytes, &name, options),
        Err(e) => {
            let mut r = FileReport::new();
            r.add(Outcome::Error, format!("error: {name}: {e}"));
            r
        }
    }
}

/// Parses program bytes into modules: one per `// -----` chunk of text, or the artifact.
fn parse_modules(bytes: &[u8], name: &str) -> Result<Vec<Module>> {
    if hlo_proto::is_hlo_proto_file(name) {
        return Ok(vec![hlo_proto::parse_hlo_module(bytes, name)?]);
    }
    if bytecode::is_bytecode(bytes) {
        return Ok(vec![bytecode::parse_bytecode(bytes, name)?]);
    }
    let src = std::str::from_utf8(bytes)
        .map_err(|e| Error::invalid(format!("{name}: neither MLIR bytecode nor UTF-8: {e}")))?;
    text::split_chunks(src)
        .iter()
        .map(|c| text::parse_module_at(c.text, name, c.first_line))
        .collect()
}

/// Runs program bytes (text with chunks, or a portable artifact).
pub fn run_bytes(
    device: &Arc<Device>,
    bytes: &[u8],
    name: &str,
    options: &RunOptions,
) -> FileReport {
    let mut report = FileReport::new();
    let modules = match parse_modules(bytes, name) {
        Ok(m) => m,
        Err(e) => {
            report.add(Outcome::of_error(&e), error_line(&e, None));
            return report;
        }
    };
    for module in &modules {
        let entries: Vec<&str> = if module.func("main").is_some() {
            vec!["main"]
        } else {
            module
                .functions
                .iter()
                .filter(|f| f.public && f.arg_types.is_empty() && f.body.is_some())
                .map(|f| f.name.as_str())
                .collect()
        };
        for entry in entries {
            report.functions += 1;
            if let Err(e) = run_function(device, module, entry, name, options, &mut report) {
                report.add(Outcome::of_error(&e), error_line(&e, Some(entry)));
            }
        }
    }
    report
}

/// A report line for an error: `unsupported: ...` for UNIMPLEMENTED, `error: KIND: ...` else.
fn error_line(e: &Error, entry: Option<&str>) -> String {
    let at = entry.map(|n| format!("@{n}: ")).unwrap_or_default();
    match e.kind {
        ErrorKind::Unimplemented => format!("unsupported: {at}{}", e.message),
        _ => format!("error: {at}{e}"),
    }
}

fn run_function(
    device: &Arc<Device>,
    module: &Module,
    entry: &str,
    file: &str,
    options: &RunOptions,
    report: &mut FileReport,
) -> Result<()> {
    let mut f = passes::prepare(module, entry)?;
    if !f.arg_types.is_empty() {
        return Err(Error::unimplemented(format!(
            "@{entry} takes {} arguments; `run` executes argument-less functions",
            f.arg_types.len()
        )));
    }
    let checks = checks::extract_checks(&mut f)?;
    let stem = Path::new(file)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string());
    let opts = CompileOptions {
        name: Some(format!("{stem}.{entry}")),
        dump_dir: options.dump_dir.clone(),
        entry: Some(entry.to_string()),
        ..Default::default()
    };
    let exe = compile_function(device, &f, Some(module), &opts)?;
    let outputs = exe.execute_blocking(&[])?;
    let mut host: Vec<Option<Vec<u8>>> = vec![None; outputs.len()];
    let mut fetch = |i: usize| -> Result<Vec<u8>> {
        if let Some(Some(b)) = host.get(i) {
            return Ok(b.clone());
        }
        let buf = outputs.get(i).ok_or_else(|| {
            Error::internal(format!("check reads result {i} of {}", outputs.len()))
        })?;
        let bytes = buf.read_to_host_blocking()?;
        host[i] = Some(bytes.clone());
        Ok(bytes)
    };
    for c in &checks {
        report.checks.0 += 1;
        let ty = match f.result_types.get(c.actual) {
            Some(Type::Tensor(t)) => t.clone(),
            _ => return Err(Error::internal("check on a non-tensor value")),
        };
        let actual = fetch(c.actual)?;
        let expected = match &c.expected {
            checks::Expected::Result(i) => fetch(*i)?,
            checks::Expected::Const(l) => l.bytes().into_owned(),
        };
        match compare::compare(&c.comparison, &ty, &actual, &expected) {
            None => report.checks.1 += 1,
            Some(m) => {
                let ulp = match m.ulp {
                    Some(u64::MAX) => ", ULP distance: not finite".to_string(),
                    Some(u) => format!(", ULP distance {u}"),
                    None => String::new(),
                };
                report.add(
                    Outcome::Fail,
                    format!(
                        "FAIL {}: @{entry}: {} on {ty}: element {:?} (linear {}): actual {}, expected {}{ulp} ({} of {} elements differ)",
                        c.loc, c.name, m.multi_index, m.index, m.actual, m.expected, m.count, m.total
                    ),
                );
            }
        }
    }
    Ok(())
}
