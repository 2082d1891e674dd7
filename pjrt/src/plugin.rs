//! Plugin-wide entries: initialization and attributes (the StableHLO versions jaxlib serializes
//! programs for).

use std::sync::OnceLock;

use wgpu_hlo::{Error, Result};

use crate::abi::{entry, set, Args};
use crate::ffi::*;
use crate::named_values::{NamedValues, Value};

/// Newest StableHLO version our bytecode reader accepts; jaxlib serializes to it.
pub const STABLEHLO_CURRENT_VERSION: &str = wgpu_hlo::frontend::bytecode::STABLEHLO_CURRENT_VERSION;
/// Oldest StableHLO version our bytecode reader accepts.
pub const STABLEHLO_MINIMUM_VERSION: &str = wgpu_hlo::frontend::bytecode::STABLEHLO_MINIMUM_VERSION;

/// `[major, minor, patch]` of a version string.
fn version_triple(v: &str) -> Result<Vec<i64>> {
    let parts: Vec<i64> = v
        .split('.')
        .map(|p| p.parse::<i64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::internal(format!("bad version {v:?}: {e}")))?;
    if parts.len() != 3 {
        return Err(Error::internal(format!(
            "bad version {v:?}: want major.minor.patch"
        )));
    }
    Ok(parts)
}

/// The plugin attributes, built once and kept for the life of the process (as the API asks).
fn attributes() -> Result<&'static NamedValues> {
    static ATTRS: OnceLock<NamedValues> = OnceLock::new();
    if let Some(a) = ATTRS.get() {
        return Ok(a);
    }
    let list = NamedValues::new(vec![
        ("xla_version".into(), Value::Int(2)),
        (
            "stablehlo_current_version".into(),
            Value::Ints(version_triple(STABLEHLO_CURRENT_VERSION)?),
        ),
        (
            "stablehlo_minimum_version".into(),
            Value::Ints(version_triple(STABLEHLO_MINIMUM_VERSION)?),
        ),
        (
            "wgpu_hlo_version".into(),
            Value::Str(env!("CARGO_PKG_VERSION").into()),
        ),
    ]);
    Ok(ATTRS.get_or_init(|| list))
}

fn initialize(_a: &Args<PJRT_Plugin_Initialize_Args>) -> Result<()> {
    crate::init_logging();
    log::info!(
        "wgpu PJRT plugin {} (PJRT C API {PJRT_API_MAJOR}.{PJRT_API_MINOR}) initialized",
        env!("CARGO_PKG_VERSION")
    );
    Ok(())
}
entry!(
    PJRT_Plugin_Initialize,
    PJRT_Plugin_Initialize_Args,
    8,
    initialize
);

fn plugin_attributes(a: &Args<PJRT_Plugin_Attributes_Args>) -> Result<()> {
    let attrs = attributes()?;
    set!(a, attributes, attrs.as_ptr());
    set!(a, num_attributes, attrs.len());
    Ok(())
}
entry!(
    PJRT_Plugin_Attributes,
    PJRT_Plugin_Attributes_Args,
    std::mem::offset_of!(PJRT_Plugin_Attributes_Args, num_attributes),
    plugin_attributes
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(version_triple("1.22.0").unwrap(), vec![1, 22, 0]);
        assert!(version_triple("1.2").is_err());
        let a = attributes().unwrap();
        // SAFETY: the list is alive (process lifetime) and has 4 entries.
        let nv = unsafe { &*a.as_ptr().add(1) };
        assert_eq!(nv.type_, PJRT_NamedValue_Type::kInt64List);
        assert_eq!(nv.value_size, 3);
    }
}
