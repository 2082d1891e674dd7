//! A serialized `HloModuleProto` compiled through `compile::compile` with the `hlo` and
//! `hlo_with_config` formats runs on the adapter with an argument, and its serialized
//! executable (which records the format) deserializes and runs the same; the CLI runs, dumps,
//! translates and counts `*.hlo.pb` files with `check.*` custom calls.

mod common;

use common::hlo_sample::module;
use prost::Message;
use wgpu_hlo::compile::{compile, deserialize, CompileOptions, ProgramFormat};
use wgpu_hlo::frontend::hlo_proto::schema::HloModuleProtoWithConfig;
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

fn sum_of(exe: &wgpu_hlo::runtime::executable::Executable, dev: &std::sync::Arc<Device>) -> f32 {
    let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let arg = dev
        .upload(&TensorType::new(vec![4], ElementType::F32), &x)
        .expect("upload");
    let out = exe.execute_blocking(&[arg]).expect("execute");
    assert_eq!(out.len(), 1);
    let bytes = out[0].read_to_host_blocking().expect("read back");
    f32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

#[test]
fn hlo_formats_compile_run_and_deserialize() {
    let dev = Device::open().expect("a wgpu adapter");
    let proto = module().encode_to_vec();
    let with_config = HloModuleProtoWithConfig {
        hlo_module: Some(module()),
    }
    .encode_to_vec();
    for (format, bytes) in [
        (ProgramFormat::Hlo, &proto),
        (ProgramFormat::HloWithConfig, &with_config),
    ] {
        let opts = CompileOptions {
            format,
            ..Default::default()
        };
        let exe = compile(&dev, bytes, &opts).expect("compiles");
        assert_eq!(sum_of(&exe, &dev), 80.0, "{format:?}");
        let again =
            deserialize(&dev, &exe.serialize(), &CompileOptions::default()).expect("deserializes");
        assert_eq!(sum_of(&again, &dev), 80.0, "{format:?} after deserialize");
    }
    // The wrong format for the bytes is an error, not a crash.
    let e = compile(&dev, &proto, &CompileOptions::default()).expect_err("not StableHLO");
    assert!(!e.message.is_empty());
}

/// `main() { a = add(c, c); check.expect_eq(a, e); ROOT a }` with constants c = [1, 2] and
/// e = `expected`.
fn checked_module(expected: [i32; 2]) -> wgpu_hlo::frontend::hlo_proto::schema::HloModuleProto {
    use wgpu_hlo::frontend::hlo_proto::schema::*;
    let v2 = ShapeProto {
        element_type: 4,
        dimensions: vec![2],
        ..Default::default()
    };
    let constant = |id: i64, values: [i32; 2]| HloInstructionProto {
        id,
        name: format!("constant.{id}"),
        opcode: "constant".into(),
        shape: Some(v2.clone()),
        literal: Some(LiteralProto {
            shape: Some(v2.clone()),
            s32s: values.to_vec(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let add = HloInstructionProto {
        id: 2,
        name: "add.2".into(),
        opcode: "add".into(),
        shape: Some(v2.clone()),
        operand_ids: vec![1, 1],
        ..Default::default()
    };
    let check = HloInstructionProto {
        id: 4,
        name: "custom-call.4".into(),
        opcode: "custom-call".into(),
        shape: Some(ShapeProto {
            element_type: 13,
            ..Default::default()
        }),
        operand_ids: vec![2, 3],
        custom_call_target: "check.expect_eq".into(),
        custom_call_has_side_effect: true,
        ..Default::default()
    };
    HloModuleProto {
        name: "checked".into(),
        entry_computation_id: 1,
        computations: vec![HloComputationProto {
            id: 1,
            name: "main".into(),
            instructions: vec![constant(1, [1, 2]), add, constant(3, expected), check],
            root_id: 2,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn the_cli_runs_translates_and_dumps_hlo_protos() {
    let dir = std::env::temp_dir().join(format!("wgpu-hlo-proto-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pass = dir.join("pass.hlo.pb");
    let fail = dir.join("fail.hlo.pb");
    std::fs::write(&pass, checked_module([2, 4]).encode_to_vec()).expect("write");
    std::fs::write(&fail, checked_module([2, 5]).encode_to_vec()).expect("write");
    let exe = || std::process::Command::new(env!("CARGO_BIN_EXE_wgpu-hlo"));
    let dump = dir.join("dump");
    let out = exe()
        .arg("run")
        .arg(&pass)
        .arg("--dump")
        .arg(&dump)
        .output()
        .expect("run");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(report.contains("1/1 checks passed"), "{report}");
    let module_dump = std::fs::read_dir(&dump)
        .expect("dump dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".module.mlir"))
        .expect("a module dump");
    let text = std::fs::read_to_string(module_dump).expect("read dump");
    assert!(text.contains("stablehlo.add"), "{text}");
    assert!(text.contains("@check.expect_eq"), "{text}");
    let out = exe().arg("run").arg(&fail).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let out = exe()
        .args(["translate", "--to", "text"])
        .arg(&pass)
        .output()
        .expect("translate");
    assert!(String::from_utf8_lossy(&out.stdout).contains("func.func public @main"));
    let out = exe()
        .arg("conformance")
        .arg(&dir)
        .output()
        .expect("conformance");
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        summary.contains("conformance: 1 passed, 1 failed, 0 unsupported, 0 errors of 2 files"),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The HLO protos TensorFlow 2.21's XLA bridge sends over PJRT (saved by
/// `python/tests/test_tensorflow.py`'s setup): TF names some operands by their id within the
/// computation, without the computation's id in the high 32 bits. Both import and compile; the
/// elementwise one (`tanh(x) * 2 + y * y`) matches the host, the Keras dense training step
/// runs with finite results.
#[test]
fn tensorflow_protos_import_compile_and_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tests/data/tensorflow");
    let dev = Device::open().expect("a wgpu adapter");
    let opts = CompileOptions {
        format: ProgramFormat::Hlo,
        ..Default::default()
    };
    let fill = |t: &TensorType, k: usize| -> Vec<u8> {
        let n = t.num_elements();
        match t.dtype {
            ElementType::F32 => (0..n)
                .flat_map(|i| (((i * 7 + k * 3) % 13) as f32 / 13.0 - 0.4).to_le_bytes())
                .collect(),
            // integer scalars (step counters and the like)
            _ => vec![0u8; n * t.dtype.byte_size()],
        }
    };
    // elementwise
    let bytes = std::fs::read(dir.join("elementwise.hlo.pb")).expect("saved proto");
    let exe = compile(&dev, &bytes, &opts).unwrap_or_else(|e| panic!("{e}"));
    let types = exe.parameter_types().to_vec();
    assert_eq!(types.len(), 2, "{types:?}");
    let host: Vec<Vec<u8>> = types.iter().enumerate().map(|(k, t)| fill(t, k)).collect();
    let args: Vec<_> = types
        .iter()
        .zip(&host)
        .map(|(t, b)| dev.upload(t, b).expect("upload"))
        .collect();
    let out = exe.execute_blocking(&args).expect("execute");
    let got = out[0].read_to_host_blocking().expect("read back");
    let f = |b: &[u8], i: usize| f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap());
    for i in 0..types[0].num_elements() {
        let (x, y) = (f(&host[0], i), f(&host[1], i));
        let want = x.tanh() * 2.0 + y * y;
        assert!(
            (f(&got, i) - want).abs() <= 1e-6 * want.abs().max(1.0),
            "[{i}]"
        );
    }
    // Keras dense training step
    let bytes = std::fs::read(dir.join("keras_dense_train_step.hlo.pb")).expect("saved proto");
    let exe = compile(&dev, &bytes, &opts).unwrap_or_else(|e| panic!("{e}"));
    let args: Vec<_> = exe
        .parameter_types()
        .iter()
        .enumerate()
        .map(|(k, t)| dev.upload(t, &fill(t, k)).expect("upload"))
        .collect();
    let out = exe.execute_blocking(&args).expect("execute");
    assert!(!out.is_empty());
    for (o, t) in out.iter().zip(exe.output_types()) {
        if t.dtype == ElementType::F32 {
            let b = o.read_to_host_blocking().expect("read back");
            assert!((0..b.len() / 4).all(|i| f(&b, i).is_finite()), "{t}");
        }
    }
}
