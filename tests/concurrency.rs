//! Reentrancy under load: several threads call the same executables at once, every result
//! checked against a host computation of that call's own inputs (values differ per thread and
//! call, so a buffer shared between two live calls shows up as a wrong number).
//! Executables: elementwise, matmul, reduce, a counted loop (fori_loop), a data-dependent
//! while (predicate read back per iteration) and a conditional.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::executable::Executable;
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

const N: usize = 1024;

const ELEMENTWISE: &str = r#"
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %two = stablehlo.constant dense<2.0> : tensor<1024xf32>
  %one = stablehlo.constant dense<1.0> : tensor<1024xf32>
  %m = stablehlo.multiply %x, %two : tensor<1024xf32>
  %r = stablehlo.add %m, %one : tensor<1024xf32>
  return %r : tensor<1024xf32>
}"#;

const MATMUL: &str = r#"
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %a = stablehlo.reshape %x : (tensor<1024xf32>) -> tensor<32x32xf32>
  %b = stablehlo.transpose %a, dims = [1, 0] : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %c = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %r = stablehlo.reshape %c : (tensor<32x32xf32>) -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}"#;

const REDUCE: &str = r#"
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %a = stablehlo.reshape %x : (tensor<1024xf32>) -> tensor<32x32xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<32x32xf32>, tensor<f32>) -> tensor<32xf32>
  %b = stablehlo.broadcast_in_dim %s, dims = [0] : (tensor<32xf32>) -> tensor<32x32xf32>
  %d = stablehlo.subtract %a, %b : tensor<32x32xf32>
  %r = stablehlo.reshape %d : (tensor<32x32xf32>) -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}"#;

// x -> x * 0.5 + 1, twenty times (a counted loop: no predicate read-back).
const FORI: &str = r#"
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<20> : tensor<i32>
  %half = stablehlo.constant dense<0.5> : tensor<1024xf32>
  %onef = stablehlo.constant dense<1.0> : tensor<1024xf32>
  %ri, %rx = stablehlo.while(%i = %i0, %v = %x) : tensor<i32>, tensor<1024xf32>
  cond {
    %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %m = stablehlo.multiply %v, %half : tensor<1024xf32>
    %v1 = stablehlo.add %m, %onef : tensor<1024xf32>
    stablehlo.return %i1, %v1 : tensor<i32>, tensor<1024xf32>
  }
  return %rx : tensor<1024xf32>
}"#;

// Doubles x until its first element reaches 1000 (the trip count depends on the data).
const WHILE: &str = r#"
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %lim = stablehlo.constant dense<1000.0> : tensor<f32>
  %two = stablehlo.constant dense<2.0> : tensor<1024xf32>
  %r = stablehlo.while(%v = %x) : tensor<1024xf32>
  cond {
    %s = stablehlo.slice %v [0:1] : (tensor<1024xf32>) -> tensor<1xf32>
    %e = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
    %c = stablehlo.compare LT, %e, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %v1 = stablehlo.multiply %v, %two : tensor<1024xf32>
    stablehlo.return %v1 : tensor<1024xf32>
  }
  return %r : tensor<1024xf32>
}"#;

// x[0] > 50 ? x - 7 : x * 3. (The barrier keeps the branches from being computed whole and
// selected, `passes::speculate`: the run reads the predicate back.)
const COND: &str = r#"
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %lim = stablehlo.constant dense<50.0> : tensor<f32>
  %s = stablehlo.slice %x [0:1] : (tensor<1024xf32>) -> tensor<1xf32>
  %e = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
  %p = stablehlo.compare GT, %e, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %r = "stablehlo.if"(%p) ({
    %seven = stablehlo.constant dense<7.0> : tensor<1024xf32>
    %a0 = stablehlo.subtract %x, %seven : tensor<1024xf32>
    %a = stablehlo.optimization_barrier %a0 : tensor<1024xf32>
    stablehlo.return %a : tensor<1024xf32>
  }, {
    %three = stablehlo.constant dense<3.0> : tensor<1024xf32>
    %b = stablehlo.multiply %x, %three : tensor<1024xf32>
    stablehlo.return %b : tensor<1024xf32>
  }) : (tensor<i1>) -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}"#;

type Reference = fn(&[f32]) -> Vec<f32>;

fn programs() -> Vec<(&'static str, &'static str, Reference)> {
    vec![
        ("elementwise", ELEMENTWISE, |x| {
            x.iter().map(|v| v * 2.0 + 1.0).collect()
        }),
        ("matmul", MATMUL, |x| {
            let mut out = vec![0.0f32; N];
            for i in 0..32 {
                for j in 0..32 {
                    let mut acc = 0.0f64;
                    for k in 0..32 {
                        acc += x[i * 32 + k] as f64 * x[j * 32 + k] as f64;
                    }
                    out[i * 32 + j] = acc as f32;
                }
            }
            out
        }),
        ("reduce", REDUCE, |x| {
            let mut out = vec![0.0f32; N];
            for i in 0..32 {
                let s: f64 = x[i * 32..i * 32 + 32].iter().map(|&v| v as f64).sum();
                for j in 0..32 {
                    out[i * 32 + j] = x[i * 32 + j] - s as f32;
                }
            }
            out
        }),
        ("fori", FORI, |x| {
            x.iter()
                .map(|&v| {
                    let mut v = v;
                    for _ in 0..20 {
                        v = v * 0.5 + 1.0;
                    }
                    v
                })
                .collect()
        }),
        ("while", WHILE, |x| {
            let mut v = x.to_vec();
            while v[0] < 1000.0 {
                v.iter_mut().for_each(|e| *e *= 2.0);
            }
            v
        }),
        ("cond", COND, |x| {
            if x[0] > 50.0 {
                x.iter().map(|v| v - 7.0).collect()
            } else {
                x.iter().map(|v| v * 3.0).collect()
            }
        }),
    ]
}

fn input(thread: usize, call: usize, program: usize) -> Vec<f32> {
    // First elements range over 1..100 so the while trip count and the branch vary.
    let base = 1.0 + ((thread * 37 + call * 11 + program * 5) % 97) as f32;
    (0..N)
        .map(|i| base + (i % 13) as f32 * 0.25 - (thread as f32) * 0.01)
        .collect()
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= 1e-4 * w.abs().max(1.0))
}

fn run_once(dev: &Arc<Device>, exe: &Executable, x: &[f32]) -> wgpu_hlo::Result<Vec<f32>> {
    let ty = TensorType::new(vec![N as i64], ElementType::F32);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let arg = dev.upload(&ty, &bytes)?;
    let (outs, _done) = exe.execute(&[arg], &[])?;
    first_result(&outs)
}

/// The first result of a call, read back as f32s.
fn first_result(outs: &[wgpu_hlo::runtime::DeviceBuffer]) -> wgpu_hlo::Result<Vec<f32>> {
    let out = outs
        .first()
        .ok_or_else(|| wgpu_hlo::Error::internal("no output"))?
        .read_to_host_blocking()?;
    Ok(out
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// `threads` threads, each calling every executable `calls` times in an order of its own.
fn stress(threads: usize, calls: usize) {
    let dev = device();
    let progs = programs();
    let exes: Vec<Arc<Executable>> = progs
        .iter()
        .map(|(name, text, _)| {
            let o = CompileOptions {
                name: Some((*name).to_string()),
                ..Default::default()
            };
            compile(&dev, text.as_bytes(), &o).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    let exes = Arc::new(exes);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let dev = dev.clone();
            let exes = exes.clone();
            std::thread::spawn(move || {
                let progs = programs();
                let mut wrong = Vec::new();
                for c in 0..calls {
                    for k in 0..progs.len() {
                        let p = (k + t + c) % progs.len();
                        let x = input(t, c, p);
                        let want = (progs[p].2)(&x);
                        match run_once(&dev, &exes[p], &x) {
                            Ok(got) if close(&got, &want) => {}
                            Ok(got) => {
                                let i = got
                                    .iter()
                                    .zip(&want)
                                    .position(|(g, w)| (g - w).abs() > 1e-4 * w.abs().max(1.0))
                                    .unwrap_or(0);
                                wrong.push(format!(
                                    "{} thread {t} call {c}: [{i}] = {} want {}",
                                    progs[p].0,
                                    got.get(i).copied().unwrap_or(f32::NAN),
                                    want[i]
                                ));
                            }
                            Err(e) => {
                                wrong.push(format!("{} thread {t} call {c}: {e}", progs[p].0))
                            }
                        }
                    }
                }
                wrong
            })
        })
        .collect();
    let mut wrong = Vec::new();
    for h in handles {
        wrong.extend(h.join().expect("a worker thread panicked"));
    }
    assert!(
        wrong.is_empty(),
        "{} wrong of {}: {:?}",
        wrong.len(),
        threads * calls * progs.len(),
        &wrong[..wrong.len().min(10)]
    );
}

#[test]
fn eight_threads_share_six_executables() {
    let calls = std::env::var("WGPU_HLO_STRESS_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    stress(8, calls);
}

#[test]
fn results_survive_later_calls() {
    // Results of earlier calls stay intact while later calls of the same executable reuse
    // pooled buffers.
    let dev = device();
    let o = CompileOptions::default();
    let exe = compile(&dev, REDUCE.as_bytes(), &o).expect("compile");
    let ty = TensorType::new(vec![N as i64], ElementType::F32);
    let mut kept = Vec::new();
    for c in 0..20 {
        let x = input(0, c, 2);
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let arg = dev.upload(&ty, &bytes).expect("upload");
        let (outs, _) = exe.execute(&[arg], &[]).expect("execute");
        kept.push((x, outs));
    }
    for (x, outs) in kept {
        let got: Vec<f32> = outs[0]
            .read_to_host_blocking()
            .expect("read")
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(close(&got, &(programs()[2].2)(&x)));
    }
}

/// Callbacks of completed work that themselves run more work and block on it, nested four
/// deep (more than the polling threads a device starts with), on several threads at once:
/// each must finish with the right numbers, not deadlock. A completion's callbacks run on the
/// polling thread the device woke (no hand-off), so this checks that another thread keeps
/// polling while they block, and that more start when every one is blocked.
#[test]
fn completion_callbacks_may_block_on_more_work() {
    use std::sync::mpsc::channel;
    let dev = device();
    let exe = compile(&dev, ELEMENTWISE.as_bytes(), &CompileOptions::default()).expect("compile");
    let ty = TensorType::new(vec![N as i64], ElementType::F32);
    // Runs x -> 2x + 1 on the device; when `depth` > 0, its completion callback runs the
    // next level (blocking on it) before reporting: the value after depth + 1 applications.
    fn level(
        dev: Arc<Device>,
        exe: Arc<Executable>,
        ty: TensorType,
        x: Vec<f32>,
        depth: usize,
        report: std::sync::mpsc::Sender<wgpu_hlo::Result<Vec<f32>>>,
    ) {
        let r = (|| {
            let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let arg = dev.upload(&ty, &bytes)?;
            let (outs, done) = exe.execute(&[arg], &[])?;
            Ok((outs, done))
        })();
        let (outs, done) = match r {
            Ok(v) => v,
            Err(e) => {
                let _ = report.send(Err(e));
                return;
            }
        };
        done.on_ready(move |r| {
            let got = r.and_then(|()| first_result(&outs));
            match got {
                Ok(y) if depth > 0 => {
                    let (tx, rx) = channel();
                    level(dev, exe, ty, y, depth - 1, tx);
                    // Blocks this callback until the deeper level has finished.
                    let deeper = rx
                        .recv_timeout(std::time::Duration::from_secs(60))
                        .unwrap_or_else(|_| Err(wgpu_hlo::Error::internal("deadlocked")));
                    let _ = report.send(deeper);
                }
                other => {
                    let _ = report.send(other);
                }
            }
        });
    }
    let (tx, rx) = channel();
    for t in 0..3 {
        let x = input(t, 0, 0);
        level(dev.clone(), exe.clone(), ty.clone(), x, 4, tx.clone());
    }
    drop(tx);
    let mut done = 0;
    for t in 0..3 {
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("a chain of blocking callbacks finished")
            .expect("no error");
        // Chains finish in any order: check against all three inputs.
        let matches = (0..3).any(|s| {
            let want: Vec<f32> = input(s, 0, 0)
                .iter()
                .map(|&v| (0..5).fold(v, |v, _| v * 2.0 + 1.0))
                .collect();
            close(&got, &want)
        });
        assert!(matches, "chain {t} gave wrong numbers");
        done += 1;
    }
    assert_eq!(done, 3);
}
