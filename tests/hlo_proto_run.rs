//! A serialized `HloModuleProto` compiled through `compile::compile` with the `hlo` and
//! `hlo_with_config` formats runs on the adapter with an argument, and its serialized
//! executable (which records the format) deserializes and runs the same.

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
