//! Runtime: the wgpu device, buffers, completion events and executing compiled programs.

pub mod buffer;
pub mod device;
pub mod event;
pub mod executable;
pub mod host_call;
mod poller;
mod pool;
pub mod strict_float;
mod warm;

pub use crate::target::Capabilities;
pub use buffer::DeviceBuffer;
pub use device::{list_adapters, AdapterDescription, BindGroupStats, Device, MemoryStats};
pub use event::{set_wait_timeout, wait_timeout, Event};
pub use executable::{KernelTime, KernelTimes};
pub use poller::inside_device_call;
pub use warm::{mesa_cache_usable, WarmStats};

/// The environment variable to set, before any Vulkan instance exists, so that a headless
/// process prints nothing: Mesa's implicit `VK_LAYER_MESA_device_select` layer asks the Wayland
/// compositor which GPU drives the display, and without `XDG_RUNTIME_DIR` libwayland prints
/// `error: XDG_RUNTIME_DIR is invalid or not set` once per instance. The layer only reorders
/// devices, and wgpu-hlo ranks adapters itself, so it is disabled (`NODEVICE_SELECT=1`) when
/// there is no runtime directory and the user has not asked the layer for a device
/// (`MESA_VK_DEVICE_SELECT`). None when nothing needs setting.
pub fn quiet_headless_env() -> Option<(&'static str, &'static str)> {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
    let headless = var("XDG_RUNTIME_DIR").is_none();
    let chosen = var("MESA_VK_DEVICE_SELECT").is_some() || var("NODEVICE_SELECT").is_some();
    (headless && !chosen).then_some(("NODEVICE_SELECT", "1"))
}
