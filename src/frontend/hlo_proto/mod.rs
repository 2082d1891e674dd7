//! The HLO proto frontend: serialized `HloModuleProto` (PJRT program format `"hlo"`, what
//! PyTorch/XLA and TensorFlow send) and `HloModuleProtoWithConfig` (`"hlo_with_config"`),
//! decoded with `prost` from a hand-written schema and imported into the same IR the StableHLO
//! frontends produce.

mod import;
pub mod schema;
pub mod shape;

use prost::Message;

use crate::error::{Error, Result};
use crate::ir::Module;

/// True for file names the CLI reads as serialized `HloModuleProto` (`*.hlo.pb`, `*.pb`).
pub fn is_hlo_proto_file(name: &str) -> bool {
    name.ends_with(".pb")
}

/// Decodes and imports a serialized `HloModuleProto`.
pub fn parse_hlo_module(bytes: &[u8], filename: &str) -> Result<Module> {
    let m = schema::HloModuleProto::decode(bytes).map_err(|e| {
        Error::invalid(format!(
            "{filename}: not a valid serialized HloModuleProto: {e}"
        ))
    })?;
    import::import_module(&m, filename)
}

/// Decodes and imports a serialized `HloModuleProtoWithConfig` (the configuration is not
/// read: replica and partition counts other than one are not supported anyway).
pub fn parse_hlo_module_with_config(bytes: &[u8], filename: &str) -> Result<Module> {
    let m = schema::HloModuleProtoWithConfig::decode(bytes).map_err(|e| {
        Error::invalid(format!(
            "{filename}: not a valid serialized HloModuleProtoWithConfig: {e}"
        ))
    })?;
    let module = m.hlo_module.ok_or_else(|| {
        Error::invalid(format!(
            "{filename}: HloModuleProtoWithConfig without a module"
        ))
    })?;
    import::import_module(&module, filename)
}
