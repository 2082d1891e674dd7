//! The conformance runner on the StableHLO conformance files (`../shared/conformance`, or
//! `WGPU_HLO_CONFORMANCE`): runs `wgpu-hlo conformance` on `interpret/` and `testdata/` and
//! fails when a directory's pass count drops below the committed baseline
//! (`tests/conformance_baseline.txt`), or when any file errors (crash, hang, bad program).
//! Writes the per-family tables and JSON results to `target/conformance/`.

use std::path::PathBuf;
use std::process::Command;

fn conformance_root() -> Option<PathBuf> {
    let root = std::env::var_os("WGPU_HLO_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"));
    if root.join("testdata").is_dir() {
        Some(root)
    } else {
        eprintln!(
            "skipping: {} not found (set WGPU_HLO_CONFORMANCE)",
            root.display()
        );
        None
    }
}

fn baseline(dir: &str) -> usize {
    let text = include_str!("conformance_baseline.txt");
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(dir)).then(|| it.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// (passed, failed, unsupported, errors, files) from the summary line.
fn parse_summary(line: &str) -> Option<[usize; 5]> {
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    nums.try_into().ok()
}

fn run_dir(root: &std::path::Path, dir: &str) -> (String, [usize; 5]) {
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/conformance");
    std::fs::create_dir_all(&out_dir).expect("create target/conformance");
    let json = out_dir.join(format!("{dir}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_wgpu-hlo"))
        .arg("conformance")
        .arg(root.join(dir))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run wgpu-hlo conformance");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(out_dir.join(format!("{dir}.txt")), &stdout).expect("write report");
    let last = stdout.lines().last().unwrap_or("").to_string();
    assert!(
        last.starts_with("conformance: ") && last.ends_with(" files"),
        "unexpected last line {last:?}\n{stdout}"
    );
    let counts = parse_summary(&last).expect("summary numbers");
    (stdout, counts)
}

#[test]
fn conformance_pass_counts_hold() {
    let Some(root) = conformance_root() else {
        return;
    };
    let mut summary = String::new();
    let mut problems = Vec::new();
    for dir in ["interpret", "testdata"] {
        let (stdout, [passed, _failed, _unsupported, errors, files]) = run_dir(&root, dir);
        summary.push_str(&format!("{dir}: {}\n", stdout.lines().last().unwrap_or("")));
        let want = baseline(dir);
        if passed < want {
            problems.push(format!(
                "{dir}: {passed} passed, below the baseline {want}\n{stdout}"
            ));
        }
        if errors > 0 {
            let lines: Vec<&str> = stdout.lines().filter(|l| l.contains(": error:")).collect();
            problems.push(format!("{dir}: {errors} errors:\n{}", lines.join("\n")));
        }
        assert!(files > 0, "{dir}: no files");
    }
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/conformance");
    let _ = std::fs::write(out_dir.join("summary.txt"), &summary);
    eprint!("{summary}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
