//! The conformance driver: runs every program file of some directories in worker child
//! processes (`wgpu-hlo __conformance-worker`), one file at a time per worker with a time
//! limit, so that a crash or a hang costs one file and a worker restart, never the run.
//! Counts outcomes per op family (the file name up to its dtype token) and in total.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{run_file, Outcome, RunOptions};
use crate::runtime::Device;

/// The argument that makes the binary a worker.
pub const WORKER_ARG: &str = "__conformance-worker";
const RESULT_TAG: &str = "@@result";

/// Options of a conformance run.
#[derive(Clone, Debug)]
pub struct ConformanceOptions {
    /// Time limit per file.
    pub timeout: Duration,
    /// Worker processes run in parallel.
    pub jobs: usize,
    /// The executable to start as worker (normally `std::env::current_exe()`).
    pub worker_exe: PathBuf,
    /// Print each file's outcome, not only the non-passes.
    pub verbose: bool,
}

/// One file's result.
#[derive(Clone, Debug)]
pub struct FileResult {
    /// The file.
    pub path: PathBuf,
    /// Its op family.
    pub family: String,
    /// Outcome.
    pub outcome: Outcome,
    /// Why it did not pass (first line), empty on a pass.
    pub reason: String,
    /// Seconds spent.
    pub seconds: f64,
}

/// Every program file in `dirs` (or the files themselves), sorted: `*.mlir`, `*.mlirbc`,
/// `*.mlir.bc`, and serialized HLO protos `*.pb` (`*.hlo.pb`).
pub fn collect_files(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && is_program_file(f))
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn is_program_file(p: &Path) -> bool {
    let n = p
        .file_name()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    n.ends_with(".mlir")
        || n.ends_with(".mlirbc")
        || n.ends_with(".mlir.bc")
        || crate::frontend::hlo_proto::is_hlo_proto_file(&n)
}

fn is_dtype_token(t: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    t == "bool"
        || t == "bfloat16"
        || t.strip_prefix("float")
            .is_some_and(|r| r.chars().next().is_some_and(|c| c.is_ascii_digit()))
        || t.strip_prefix("uint").is_some_and(digits)
        || t.strip_prefix("int").is_some_and(digits)
        || t.strip_prefix("complex").is_some_and(digits)
}

/// The op family of a file: its name up to the first dtype token (`abs_int8_20_20.mlir` →
/// `abs`, `dot_general_float32_...` → `dot_general`), or the whole stem when it has none.
pub fn family(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .trim_end_matches(".pb")
        .trim_end_matches(".hlo")
        .trim_end_matches(".bc")
        .trim_end_matches(".mlirbc")
        .trim_end_matches(".mlir")
        .to_string();
    let tokens: Vec<&str> = stem.split('_').collect();
    match tokens.iter().position(|t| is_dtype_token(t)) {
        Some(0) | None => stem.clone(),
        Some(k) => tokens[..k].join("_"),
    }
}

/// The worker loop: reads file paths from stdin, runs each, and writes one result line per
/// file to stdout.
pub fn worker_main() -> i32 {
    let device = Device::open();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(path) = line else { break };
        let (outcome, reason) = match &device {
            Ok(d) => {
                let r = run_file(d, Path::new(&path), &RunOptions::default());
                (r.outcome, r.reason())
            }
            Err(e) => (Outcome::Error, format!("error: no device: {e}")),
        };
        let reason: String = reason
            .chars()
            .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
            .collect();
        if writeln!(stdout, "{RESULT_TAG}\t{}\t{reason}", outcome.name()).is_err()
            || stdout.flush().is_err()
        {
            return 1;
        }
    }
    0
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    results: Receiver<String>,
}

impl Worker {
    fn start(exe: &Path) -> std::io::Result<Worker> {
        let mut child = Command::new(exe)
            .arg(WORKER_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("worker without stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("worker without stdout"))?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(RESULT_TAG) && tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            results: rx,
        })
    }

    fn stop(mut self) -> String {
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        }
    }
}

fn run_one(
    worker: &mut Option<Worker>,
    exe: &Path,
    path: &Path,
    timeout: Duration,
) -> (Outcome, String) {
    if worker.is_none() {
        match Worker::start(exe) {
            Ok(w) => *worker = Some(w),
            Err(e) => return (Outcome::Error, format!("error: cannot start a worker: {e}")),
        }
    }
    let Some(w) = worker.as_mut() else {
        return (Outcome::Error, "error: no worker".into());
    };
    if writeln!(w.stdin, "{}", path.display()).is_err() || w.stdin.flush().is_err() {
        let status = worker.take().map(Worker::stop).unwrap_or_default();
        return (Outcome::Error, format!("error: worker died ({status})"));
    }
    match w.results.recv_timeout(timeout) {
        Ok(line) => {
            let mut parts = line.splitn(3, '\t');
            let _ = parts.next();
            let outcome = parts
                .next()
                .and_then(Outcome::from_name)
                .unwrap_or(Outcome::Error);
            (outcome, parts.next().unwrap_or("").to_string())
        }
        Err(RecvTimeoutError::Timeout) => {
            worker.take().map(Worker::stop);
            (
                Outcome::Error,
                format!("error: timed out after {} s", timeout.as_secs()),
            )
        }
        Err(RecvTimeoutError::Disconnected) => {
            let status = worker.take().map(Worker::stop).unwrap_or_default();
            (Outcome::Error, format!("error: crashed ({status})"))
        }
    }
}

/// Runs every file, printing non-passes as they come, then the per-family table and the
/// summary line. Returns the results in file order.
pub fn run(files: &[PathBuf], options: &ConformanceOptions) -> Vec<FileResult> {
    let queue = Arc::new(Mutex::new(0usize));
    let results: Arc<Mutex<Vec<Option<FileResult>>>> =
        Arc::new(Mutex::new(vec![None; files.len()]));
    let files = Arc::new(files.to_vec());
    let jobs = options.jobs.max(1).min(files.len().max(1));
    let mut handles = Vec::new();
    for _ in 0..jobs {
        let queue = queue.clone();
        let results = results.clone();
        let files = files.clone();
        let options = options.clone();
        handles.push(std::thread::spawn(move || {
            let mut worker: Option<Worker> = None;
            loop {
                let i = {
                    let Ok(mut q) = queue.lock() else { break };
                    let i = *q;
                    *q += 1;
                    i
                };
                let Some(path) = files.get(i) else { break };
                let start = Instant::now();
                let (outcome, reason) =
                    run_one(&mut worker, &options.worker_exe, path, options.timeout);
                let r = FileResult {
                    path: path.clone(),
                    family: family(path),
                    outcome,
                    reason,
                    seconds: start.elapsed().as_secs_f64(),
                };
                if options.verbose || outcome != Outcome::Pass {
                    let name = path
                        .file_name()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if outcome == Outcome::Pass {
                        println!("{name}: passed ({:.2} s)", r.seconds);
                    } else {
                        let reason = if r.reason.is_empty() {
                            outcome.name()
                        } else {
                            &r.reason
                        };
                        println!("{name}: {reason}");
                    }
                }
                if let Ok(mut res) = results.lock() {
                    res[i] = Some(r);
                }
            }
            if let Some(w) = worker {
                drop(w.stdin);
                let mut child = w.child;
                let _ = child.wait();
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    let res = results.lock().map(|r| r.clone()).unwrap_or_default();
    res.into_iter()
        .zip(files.iter())
        .map(|(r, p)| {
            r.unwrap_or_else(|| FileResult {
                path: p.clone(),
                family: family(p),
                outcome: Outcome::Error,
                reason: "error: not run".into(),
                seconds: 0.0,
            })
        })
        .collect()
}

/// Per-outcome counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Passed files.
    pub passed: usize,
    /// Files with a failed check.
    pub failed: usize,
    /// Unsupported files.
    pub unsupported: usize,
    /// Errors (bad program, crash, timeout).
    pub errors: usize,
}

impl Counts {
    fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Pass => self.passed += 1,
            Outcome::Fail => self.failed += 1,
            Outcome::Unsupported => self.unsupported += 1,
            Outcome::Error => self.errors += 1,
        }
    }
    /// Files counted.
    pub fn total(&self) -> usize {
        self.passed + self.failed + self.unsupported + self.errors
    }
}

/// Totals per family and overall.
pub fn tally(results: &[FileResult]) -> (BTreeMap<String, Counts>, Counts) {
    let mut per = BTreeMap::new();
    let mut all = Counts::default();
    for r in results {
        per.entry(r.family.clone())
            .or_insert_with(Counts::default)
            .add(r.outcome);
        all.add(r.outcome);
    }
    (per, all)
}

/// The per-family table and the summary line (the summary is the last line).
pub fn summary(results: &[FileResult]) -> String {
    let (per, all) = tally(results);
    let mut s = String::new();
    s.push_str(&format!(
        "{:<32} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
        "family", "files", "pass", "fail", "unsup", "error"
    ));
    for (fam, c) in &per {
        s.push_str(&format!(
            "{:<32} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
            fam,
            c.total(),
            c.passed,
            c.failed,
            c.unsupported,
            c.errors
        ));
    }
    s.push_str(&summary_line(&all));
    s
}

/// `conformance: P passed, F failed, U unsupported, E errors of N files`.
pub fn summary_line(c: &Counts) -> String {
    format!(
        "conformance: {} passed, {} failed, {} unsupported, {} errors of {} files",
        c.passed,
        c.failed,
        c.unsupported,
        c.errors,
        c.total()
    )
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The results as JSON: totals, families and files.
pub fn to_json(results: &[FileResult]) -> String {
    let (per, all) = tally(results);
    let counts = |c: &Counts| {
        format!(
            "{{\"files\": {}, \"passed\": {}, \"failed\": {}, \"unsupported\": {}, \"errors\": {}}}",
            c.total(),
            c.passed,
            c.failed,
            c.unsupported,
            c.errors
        )
    };
    let mut s = format!("{{\n  \"total\": {},\n  \"families\": {{\n", counts(&all));
    let fams: Vec<String> = per
        .iter()
        .map(|(f, c)| format!("    {}: {}", json_str(f), counts(c)))
        .collect();
    s.push_str(&fams.join(",\n"));
    s.push_str("\n  },\n  \"files\": [\n");
    let files: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "    {{\"file\": {}, \"family\": {}, \"outcome\": {}, \"seconds\": {:.3}, \"reason\": {}}}",
                json_str(&r.path.display().to_string()),
                json_str(&r.family),
                json_str(r.outcome.name()),
                r.seconds,
                json_str(&r.reason)
            )
        })
        .collect();
    s.push_str(&files.join(",\n"));
    s.push_str("\n  ]\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_stop_at_the_dtype() {
        let f = |s: &str| family(Path::new(s));
        assert_eq!(f("abs_int8_20_20.mlir"), "abs");
        assert_eq!(f("dot_general_float32_4_3.mlir"), "dot_general");
        assert_eq!(f("acos_complex64_20_20_chlo.mlir"), "acos");
        assert_eq!(f("dynamic_update_slice.mlir"), "dynamic_update_slice");
        assert_eq!(f("x_uint16_1.mlir.bc"), "x");
        assert_eq!(
            f("select_and_scatter_bfloat16_2.mlirbc"),
            "select_and_scatter"
        );
    }

    #[test]
    fn the_summary_line_is_last() {
        let r = vec![FileResult {
            path: "a_float32.mlir".into(),
            family: "a".into(),
            outcome: Outcome::Pass,
            reason: String::new(),
            seconds: 0.1,
        }];
        let s = summary(&r);
        assert_eq!(
            s.lines().last().unwrap(),
            "conformance: 1 passed, 0 failed, 0 unsupported, 0 errors of 1 files"
        );
        assert!(to_json(&r).contains("\"passed\": 1"));
    }
}
