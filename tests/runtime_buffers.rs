//! Buffers on a real adapter (lavapipe on CI): uploads, read-backs, copies, deletion.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter (install mesa-vulkan-drivers)"))
        .clone()
}

#[test]
fn upload_read_back_round_trips_every_width() {
    let dev = device();
    for (dtype, n) in [
        (ElementType::Pred, 7),
        (ElementType::I8, 5),
        (ElementType::F16, 3),
        (ElementType::F32, 4),
        (ElementType::F64, 2),
        (ElementType::C128, 1),
        (ElementType::F32, 0),
    ] {
        let ty = TensorType::new(vec![n], dtype);
        let bytes: Vec<u8> = (0..ty.byte_size()).map(|i| (i * 37 + 11) as u8).collect();
        let buf = dev.upload(&ty, &bytes).unwrap();
        assert_eq!(buf.read_to_host_blocking().unwrap(), bytes, "{ty}");
        let c = buf.copy().unwrap();
        buf.delete();
        assert!(buf.is_deleted());
        assert!(buf.read_to_host_blocking().is_err());
        assert_eq!(c.read_to_host_blocking().unwrap(), bytes, "copy of {ty}");
    }
}

#[test]
fn wrong_sizes_are_errors() {
    let dev = device();
    let ty = TensorType::new(vec![3], ElementType::F32);
    assert!(dev.upload(&ty, &[0u8; 11]).is_err());
}

#[test]
fn memory_stats_count_allocations() {
    let dev = device();
    let before = dev.memory_stats().num_allocs;
    let ty = TensorType::new(vec![1024], ElementType::F32);
    let _b = dev.upload(&ty, &vec![0u8; 4096]).unwrap();
    let s = dev.memory_stats();
    assert!(s.num_allocs > before);
    assert!(s.bytes_in_use >= 4096);
}
