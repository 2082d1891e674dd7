//! Runtime: the wgpu device, buffers, completion events and executing compiled programs.

pub mod buffer;
pub mod device;
pub mod event;
pub mod executable;
pub mod host_call;
mod poller;
mod pool;

pub use buffer::DeviceBuffer;
pub use device::{list_adapters, AdapterDescription, Capabilities, Device, MemoryStats};
pub use event::{set_wait_timeout, wait_timeout, Event};
