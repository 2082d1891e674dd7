//! The `wgpu-hlo` binary as a user runs it: exit codes of `run`, the dump of a fused chain,
//! errors with `file:line:col`, and the conformance summary over a directory with one file of
//! each outcome.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn exe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wgpu-hlo"))
}

/// A fresh directory under the temp dir, removed when the test ends (pass or fail).
struct Tmp(PathBuf);

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Tmp {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl AsRef<Path> for Tmp {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("wgpu-hlo-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    Tmp(d)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const CHAIN: &str = r#"func.func @main() -> tensor<f32> {
  %x = stablehlo.iota dim = 0 : tensor<1024xf32>
  %c = stablehlo.constant dense<0.5> : tensor<1024xf32>
  %a = stablehlo.multiply %x, %c : tensor<1024xf32>
  %b = stablehlo.add %a, %c : tensor<1024xf32>
  %s = stablehlo.negate %b : tensor<1024xf32>
  %e = stablehlo.abs %s : tensor<1024xf32>
  %t = stablehlo.subtract %e, %c : tensor<1024xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%t init: %z) applies stablehlo.add across dimensions = [0] : (tensor<1024xf32>, tensor<f32>) -> tensor<f32>
  check.expect_eq_const %r, dense<261888.0> : tensor<f32>
  return %r : tensor<f32>
}
"#;

const FAILING: &str = r#"func.func @main() -> tensor<2xi32> {
  %x = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %y = stablehlo.add %x, %x : tensor<2xi32>
  check.expect_eq_const %y, dense<[2, 5]> : tensor<2xi32>
  return %y : tensor<2xi32>
}
"#;

// Two replicas: one device cannot run it (with one, all_reduce is the identity).
const UNSUPPORTED: &str = r#"func.func @main() -> tensor<2xf32> {
  %x = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %y = "stablehlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}
"#;

#[test]
fn a_fused_chain_runs_as_one_kernel_and_dumps() {
    let d = tmp("chain");
    let f = write(&d, "chain.mlir", CHAIN);
    let dump = d.join("dump");
    let o = exe()
        .arg("run")
        .arg(&f)
        .arg("--dump")
        .arg(&dump)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let files: Vec<String> = std::fs::read_dir(&dump)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let kernels: Vec<&String> = files.iter().filter(|n| n.ends_with(".wgsl")).collect();
    assert_eq!(kernels.len(), 1, "{files:?}");
    for suffix in [
        "module.mlir",
        "after_passes.mlir",
        "partition.txt",
        "program.txt",
    ] {
        assert!(
            files.iter().any(|n| n.ends_with(suffix)),
            "{suffix} missing: {files:?}"
        );
    }
    let wgsl = std::fs::read_to_string(dump.join(kernels[0])).unwrap();
    assert!(
        wgsl.contains("fuses:") && wgsl.contains("stablehlo.negate"),
        "{wgsl}"
    );
}

#[test]
fn an_empty_dump_variable_dumps_nothing() {
    let d = tmp("emptydump");
    let f = write(&d, "chain.mlir", CHAIN);
    let o = exe()
        .arg("run")
        .arg(&f)
        .env("WGPU_HLO_DUMP", "")
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let files: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, vec!["chain.mlir".to_string()]);
}

#[test]
fn exit_codes_say_what_happened() {
    let d = tmp("codes");
    let fail = write(&d, "fail.mlir", FAILING);
    let o = exe().arg("run").arg(&fail).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("element [1]"), "{}", text(&o));

    let unsup = write(&d, "unsup.mlir", UNSUPPORTED);
    let o = exe().arg("run").arg(&unsup).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("all_reduce"), "{}", text(&o));

    for (name, src, want) in [
        ("trunc.mlir", &CHAIN[..120], "trunc.mlir:"),
        (
            "unknown.mlir",
            &CHAIN.replace("stablehlo.negate", "stablehlo.negative"),
            "unknown.mlir:6:",
        ),
        (
            "types.mlir",
            &FAILING.replace("%x, %x : tensor<2xi32>", "%x, %x : tensor<3xi32>"),
            "types.mlir:3:",
        ),
        (
            "garbage.mlir",
            "\u{0}\u{1}\u{2}not mlir at all",
            "garbage.mlir",
        ),
    ] {
        let p = write(&d, name, src);
        let o = exe().arg("run").arg(&p).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{name}: {}", text(&o));
        assert!(text(&o).contains(want), "{name}: {}", text(&o));
        assert!(!text(&o).contains("panicked"), "{name}: {}", text(&o));
    }
}

#[test]
fn conformance_counts_every_outcome() {
    let d = tmp("conf");
    write(&d, "chain_float32_1.mlir", CHAIN);
    write(&d, "add_int32_2.mlir", FAILING);
    write(&d, "all_reduce_float32_2.mlir", UNSUPPORTED);
    write(&d, "broken_float32.mlir", "func.func @main(");
    let json = d.join("out.json");
    let o = exe()
        .arg("conformance")
        .arg(&d)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        out.lines().last(),
        Some("conformance: 1 passed, 1 failed, 1 unsupported, 1 errors of 4 files"),
        "{out}"
    );
    assert!(
        out.contains("all_reduce_float32_2.mlir: unsupported:"),
        "{out}"
    );
    assert!(out.contains("\nchain "), "{out}");
    let j = std::fs::read_to_string(&json).unwrap();
    assert!(j.contains("\"family\": \"all_reduce\""), "{j}");
}

/// A sort with rows longer than the ranking kernel takes: the bitonic passes (init, one stage
/// kernel launched per stage, gather), checked against the sorted values and a stable argsort.
const LONG_SORT: &str = r#"
func.func @main() {
  %i = stablehlo.iota dim = 1 : tensor<2x1000xi32>
  %c7 = stablehlo.constant dense<7> : tensor<2x1000xi32>
  %c1000 = stablehlo.constant dense<1000> : tensor<2x1000xi32>
  %m = stablehlo.multiply %i, %c7 : tensor<2x1000xi32>
  %k = stablehlo.remainder %m, %c1000 : tensor<2x1000xi32>
  %c10 = stablehlo.constant dense<10> : tensor<2x1000xi32>
  %key = stablehlo.divide %k, %c10 : tensor<2x1000xi32>
  %s:2 = "stablehlo.sort"(%key, %i) ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>, %x: tensor<i32>, %y: tensor<i32>):
    %lt = stablehlo.compare LT, %a, %b, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) {dimension = 1 : i64, is_stable = true} : (tensor<2x1000xi32>, tensor<2x1000xi32>) -> (tensor<2x1000xi32>, tensor<2x1000xi32>)
  %want = stablehlo.divide %i, %c10 : tensor<2x1000xi32>
  check.expect_eq %s#0, %want : tensor<2x1000xi32>
  %c3 = stablehlo.constant dense<3> : tensor<2x1000xi32>
  %first = stablehlo.slice %s#1 [0:2, 0:1] : (tensor<2x1000xi32>) -> tensor<2x1xi32>
  check.expect_eq_const %first, dense<0> : tensor<2x1xi32>
  %last = stablehlo.slice %s#1 [0:2, 999:1000] : (tensor<2x1000xi32>) -> tensor<2x1xi32>
  check.expect_eq_const %last, dense<999> : tensor<2x1xi32>
  func.return
}
"#;

#[test]
fn long_rows_sort_with_the_bitonic_network() {
    let d = tmp("bitonic");
    let f = write(&d, "sort.mlir", LONG_SORT);
    let dump = d.join("dump");
    let o = exe()
        .arg("run")
        .arg(&f)
        .arg("--dump")
        .arg(&dump)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let names: Vec<String> = std::fs::read_dir(&dump)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Rows of 1000 sort inside one workgroup each (`_local`); kernels no step launches
    // (the network's global pass here) are dropped when launches merge.
    assert!(
        names
            .iter()
            .any(|n| n.ends_with("_local.wgsl") || n.ends_with("_pass.wgsl")),
        "{names:?}"
    );
}

#[test]
fn bench_times_runs_the_floor_and_each_kernel() {
    let dir = tmp("bench");
    let file = write(
        &dir,
        "small.mlir",
        r#"func.func @main(%x: tensor<256xf32>, %y: tensor<256xf32>) -> tensor<f32> {
  %a = stablehlo.multiply %x, %y : tensor<256xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<256xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}
"#,
    );
    let out = exe()
        .args([
            "bench",
            file.to_str().unwrap(),
            "--runs",
            "3",
            "--per-kernel",
        ])
        .env("WGPU_HLO_DUMP", dir.join("dump"))
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("3 runs"), "{t}");
    assert!(
        t.contains("median ") && t.contains("raw-wgpu floor "),
        "{t}"
    );
    let kernels: Vec<String> = std::fs::read_dir(dir.join("dump"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let k = name.strip_suffix(".wgsl")?.rsplit('.').next()?.to_string();
            Some(k)
        })
        .collect();
    assert!(!kernels.is_empty());
    if t.contains("per-kernel times unavailable") {
        return;
    }
    assert!(t.contains("per-kernel GPU time"), "{t}");
    // Every kernel named in the table is one the dump wrote, and the dump has its times.
    for k in &kernels {
        assert!(t.contains(k.as_str()), "{k} missing from {t}");
    }
    let times = std::fs::read_dir(dir.join("dump"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(".kernel_times.txt")
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap_or_default();
    assert!(times.contains("execution 0"), "{times}");
    let bad = exe()
        .args(["bench", file.to_str().unwrap(), "--runs", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
