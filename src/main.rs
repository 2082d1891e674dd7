//! The `wgpu-hlo` command line: `devices`, `run`, `bench`, `conformance`, `translate`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use wgpu_hlo::ir::print::print_module;
use wgpu_hlo::runner::conformance::{self, ConformanceOptions};
use wgpu_hlo::runner::{self, Outcome, RunOptions};
use wgpu_hlo::runtime::device::list_adapters;
use wgpu_hlo::runtime::Device;
use wgpu_hlo::{Error, ErrorKind};

const USAGE: &str = "\
usage:
  wgpu-hlo devices                          list adapters; * marks the one used
  wgpu-hlo run FILE [--dump DIR]            run @main (or every argument-less function) and its checks
  wgpu-hlo bench FILE [--runs N] [--entry NAME] [--per-kernel]
                                            compile once, run N times (default 20) on random floats /
                                            zero integers; median and min ms, the raw-wgpu floor and,
                                            with --per-kernel, each kernel's GPU time (timestamp queries)
  wgpu-hlo conformance PATH... [--json OUT] [--timeout SECS] [--jobs N] [--verbose]
                                            run every .mlir / .mlirbc / .mlir.bc / .pb file, one worker process each
  wgpu-hlo translate FILE --to text         print a module (text or portable artifact) as StableHLO text

FILE may be StableHLO text, a portable artifact (MLIR bytecode) or, named *.pb / *.hlo.pb, a
serialized HloModuleProto (--dump and translate show it as StableHLO text). Environment: WGPU_BACKEND,
WGPU_ADAPTER_NAME, WGPU_POWER_PREF pick the adapter; WGPU_HLO_DUMP=DIR dumps every compilation.
exit codes of run: 0 all checks pass, 1 a check failed, 2 bad program or usage, 3 unimplemented";

fn main() -> ExitCode {
    // Set before any thread exists: see `wgpu_hlo::runtime::quiet_headless_env`.
    if let Some((name, value)) = wgpu_hlo::runtime::quiet_headless_env() {
        std::env::set_var(name, value);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some(conformance::WORKER_ARG) => conformance::worker_main(),
        Some("devices") => devices(),
        Some("run") => run(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("conformance") => conformance_cmd(&args[1..]),
        Some("translate") => translate(&args[1..]),
        Some("-h") | Some("--help") | Some("help") => {
            println!("{USAGE}");
            0
        }
        _ => {
            eprintln!("{USAGE}");
            2
        }
    };
    ExitCode::from(code as u8)
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("wgpu-hlo: {msg}\n{USAGE}");
    2
}

/// `--flag value` pairs in command-line order.
type Options = Vec<(String, String)>;

/// Splits `args` into positional arguments and `--flag VALUE` options (`flags` take a value;
/// `switches` do not).
fn parse_args(
    args: &[String],
    flags: &[&str],
    switches: &[&str],
) -> Result<(Vec<String>, Options), String> {
    let mut pos = Vec::new();
    let mut opts = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some((k, v)) = a.split_once('=').filter(|(k, _)| flags.contains(k)) {
            opts.push((k.to_string(), v.to_string()));
        } else if flags.contains(&a.as_str()) {
            let v = args.get(i + 1).ok_or(format!("{a} needs a value"))?;
            opts.push((a.clone(), v.clone()));
            i += 1;
        } else if switches.contains(&a.as_str()) {
            opts.push((a.clone(), String::new()));
        } else if a.starts_with("--") {
            return Err(format!("unknown option {a}"));
        } else {
            pos.push(a.clone());
        }
        i += 1;
    }
    Ok((pos, opts))
}

fn opt<'a>(opts: &'a [(String, String)], name: &str) -> Option<&'a str> {
    opts.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn exit_code_of(e: &Error) -> i32 {
    match e.kind {
        ErrorKind::Unimplemented => 3,
        _ => 2,
    }
}

fn devices() -> i32 {
    let adapters = list_adapters();
    if adapters.is_empty() {
        eprintln!(
            "no wgpu adapter found (install a Vulkan driver, e.g. Debian's mesa-vulkan-drivers \
             for lavapipe, or check WGPU_BACKEND)"
        );
        return 1;
    }
    let wanted = std::env::var("WGPU_ADAPTER_NAME")
        .ok()
        .map(|w| w.to_lowercase());
    let default = match &wanted {
        Some(w) => adapters
            .iter()
            .position(|a| a.name.to_lowercase().contains(w)),
        None => Some(0),
    };
    for (i, a) in adapters.iter().enumerate() {
        let mark = if Some(i) == default { "*" } else { " " };
        println!(
            "{mark} {i}: {}  backend={} type={} driver={} {}",
            a.name, a.backend, a.device_type, a.driver, a.driver_info
        );
        if !a.capabilities.is_empty() {
            println!("     {}", a.capabilities);
        }
    }
    0
}

fn run(args: &[String]) -> i32 {
    let (pos, opts) = match parse_args(args, &["--dump"], &[]) {
        Ok(x) => x,
        Err(e) => return usage_error(&e),
    };
    let [file] = pos.as_slice() else {
        return usage_error("run takes one FILE");
    };
    let device = match Device::open() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let options = RunOptions {
        dump_dir: opt(&opts, "--dump").map(PathBuf::from),
    };
    let report = runner::run_file(&device, std::path::Path::new(file), &options);
    for line in &report.lines {
        println!("{line}");
    }
    let (total, passed) = report.checks;
    match report.outcome {
        Outcome::Pass => {
            println!(
                "PASS {file}: {passed}/{total} checks passed in {} function(s) on {}",
                report.functions,
                device.info()
            );
            0
        }
        Outcome::Fail => {
            println!("FAIL {file}: {passed}/{total} checks passed");
            1
        }
        Outcome::Unsupported => 3,
        Outcome::Error => 2,
    }
}

fn conformance_cmd(args: &[String]) -> i32 {
    let (pos, opts) = match parse_args(args, &["--json", "--timeout", "--jobs"], &["--verbose"]) {
        Ok(x) => x,
        Err(e) => return usage_error(&e),
    };
    if pos.is_empty() {
        return usage_error("conformance needs at least one directory or file");
    }
    let timeout = match opt(&opts, "--timeout").map(str::parse::<u64>) {
        None => 120,
        Some(Ok(s)) if s > 0 => s,
        Some(_) => return usage_error("--timeout takes a positive number of seconds"),
    };
    let default_jobs = std::thread::available_parallelism()
        .map(|n| n.get().min(4))
        .unwrap_or(1);
    let jobs = match opt(&opts, "--jobs").map(str::parse::<usize>) {
        None => default_jobs,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => return usage_error("--jobs takes a positive number"),
    };
    let worker_exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wgpu-hlo: cannot find my own executable: {e}");
            return 2;
        }
    };
    let paths: Vec<PathBuf> = pos.iter().map(PathBuf::from).collect();
    let files = match conformance::collect_files(&paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("wgpu-hlo: reading {}: {e}", pos.join(" "));
            return 2;
        }
    };
    let options = ConformanceOptions {
        timeout: Duration::from_secs(timeout),
        jobs,
        worker_exe,
        verbose: opt(&opts, "--verbose").is_some(),
    };
    let results = conformance::run(&files, &options);
    if let Some(out) = opt(&opts, "--json") {
        if let Err(e) = std::fs::write(out, conformance::to_json(&results)) {
            eprintln!("wgpu-hlo: writing {out}: {e}");
        }
    }
    print!("{}", conformance::summary(&results));
    println!();
    0
}

fn translate(args: &[String]) -> i32 {
    let (pos, opts) = match parse_args(args, &["--to"], &[]) {
        Ok(x) => x,
        Err(e) => return usage_error(&e),
    };
    let [file] = pos.as_slice() else {
        return usage_error("translate takes one FILE");
    };
    match opt(&opts, "--to") {
        Some("text") | None => {}
        Some(other) => return usage_error(&format!("--to {other}: only `text` is supported")),
    }
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("wgpu-hlo: {file}: {e}");
            return 2;
        }
    };
    match wgpu_hlo::compile::parse(&bytes, file) {
        Ok(m) => {
            print!("{}", print_module(&m));
            0
        }
        Err(e) => {
            eprintln!("{e}");
            exit_code_of(&e).min(2)
        }
    }
}

/// Deterministic pseudo-random bytes for an input of type `ty`: floats uniform in [-1, 1),
/// everything else zero.
fn bench_input(ty: &wgpu_hlo::ir::TensorType, seed: &mut u64) -> Vec<u8> {
    use wgpu_hlo::ir::ElementType as E;
    let n = ty.num_elements();
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    match ty.dtype {
        E::F32 => (0..n).flat_map(|_| (next() as f32).to_le_bytes()).collect(),
        E::F64 => (0..n).flat_map(|_| next().to_le_bytes()).collect(),
        E::F16 => (0..n)
            .flat_map(|_| half::f16::from_f64(next()).to_le_bytes())
            .collect(),
        E::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f64(next()).to_le_bytes())
            .collect(),
        _ => vec![0; ty.byte_size()],
    }
}

fn bench(args: &[String]) -> i32 {
    let (pos, opts) = match parse_args(args, &["--runs", "--entry"], &["--per-kernel"]) {
        Ok(x) => x,
        Err(e) => return usage_error(&e),
    };
    let [file] = pos.as_slice() else {
        return usage_error("bench takes one FILE");
    };
    let runs = match opt(&opts, "--runs").map(str::parse::<usize>) {
        None => 20,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => return usage_error("--runs takes a positive number"),
    };
    let fail = |e: Error| {
        eprintln!("{e}");
        exit_code_of(&e)
    };
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("wgpu-hlo: {file}: {e}");
            return 2;
        }
    };
    let module = match wgpu_hlo::compile::parse(&bytes, file) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let entry = match opt(&opts, "--entry") {
        Some(e) => e.to_string(),
        None if module.functions.iter().any(|f| f.name == "main") => "main".into(),
        None => match module.functions.first() {
            Some(f) => f.name.clone(),
            None => return usage_error(&format!("{file} has no function")),
        },
    };
    let device = match Device::open() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let start = std::time::Instant::now();
    let exe = match wgpu_hlo::passes::prepare(&module, &entry).and_then(|f| {
        wgpu_hlo::compile::compile_function(
            &device,
            &f,
            Some(&module),
            &wgpu_hlo::compile::CompileOptions::default(),
        )
    }) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut inputs = Vec::new();
    for ty in exe.parameter_types() {
        match device.upload(ty, &bench_input(ty, &mut seed)) {
            Ok(b) => inputs.push(b),
            Err(e) => return fail(e),
        }
    }
    let once = || -> Result<(), Error> {
        let (outs, done) = exe.execute(&inputs, &[])?;
        // The first result read back, as a framework would: completion and read-back.
        if let Some(o) = outs.first() {
            o.read_to_host_blocking()?;
        }
        done.wait()
    };
    // One warm-up call (first submissions cost more), then the timed ones.
    if let Err(e) = once() {
        return fail(e);
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = std::time::Instant::now();
        if let Err(e) = once() {
            return fail(e);
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let floor = match device.raw_floor_ms(100) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let median = times[times.len() / 2];
    println!("{file} @{entry} on {}", device.info());
    println!(
        "compile {compile_ms:.1} ms, {} kernels, {runs} runs (execute + read back the first result)",
        exe.kernels().len()
    );
    println!(
        "median {median:.4} ms  min {:.4} ms  raw-wgpu floor {floor:.4} ms  median/floor {:.1}x",
        times[0],
        median / floor
    );
    if opt(&opts, "--per-kernel").is_some() {
        if !device.has_timestamps() {
            println!("per-kernel times unavailable on this adapter (no timestamp queries)");
            return 0;
        }
        // The median over a few profiled runs of each kernel's total GPU time (as the dump
        // counts it: from the end of the dispatches before to its end) and of the time between
        // its own timestamps.
        let mut per: Vec<(String, usize, Vec<f64>, Vec<f64>)> = Vec::new();
        let mut untimed = 0;
        let mut spans = Vec::new();
        let mut dispatches = 0;
        for _ in 0..runs.clamp(1, 5) {
            match exe.execute_profiled(&inputs) {
                Ok((_, t)) => {
                    untimed = t.untimed;
                    spans.push(t.span_ms);
                    dispatches = t.dispatches;
                    for k in t.kernels {
                        match per.iter_mut().find(|e| e.0 == k.name) {
                            Some(e) => {
                                e.2.push(k.ms);
                                e.3.push(k.inside_ms);
                            }
                            None => per.push((k.name, k.dispatches, vec![k.ms], vec![k.inside_ms])),
                        }
                    }
                }
                Err(e) => return fail(e),
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let mut rows: Vec<(String, usize, f64, f64)> = per
            .into_iter()
            .map(|(name, n, ms, inside)| (name, n, median(ms), median(inside)))
            .collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        let total: f64 = rows.iter().map(|r| r.2).sum();
        let span = median(spans);
        println!(
            "per-kernel GPU time (median of profiled runs), {total:.4} ms in all, {dispatches} \
             dispatches, {span:.4} ms from the first one's start to the last one's end; per \
             kernel from the end of the dispatches before it to its end, then (in brackets) \
             between its own timestamps:"
        );
        for (name, n, ms, inside) in rows {
            let share = if total > 0.0 { 100.0 * ms / total } else { 0.0 };
            println!("  {ms:10.4} ms {share:5.1}%  {n:>5}x  {name}  ({inside:.4} ms)");
        }
        if untimed > 0 {
            println!("  ({untimed} further dispatches were not timed)");
        }
    }
    0
}
