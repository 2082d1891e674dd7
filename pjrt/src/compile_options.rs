//! The few messages of `xla.CompileOptionsProto` (and `xla.DeviceAssignmentProto`) the plugin
//! reads or writes, declared by hand with prost: field numbers from
//! `xla/pjrt/proto/compile_options.proto`, `xla/xla.proto` and `xla/xla_data.proto`. Unknown
//! fields are skipped by the decoder.

use std::path::PathBuf;

use prost::Message;
use wgpu_hlo::{Error, Result};

/// `xla.CompileOptionsProto` (the fields we read).
#[derive(Clone, PartialEq, Message)]
pub struct CompileOptionsProto {
    /// Layouts the caller wants for the arguments (field 1).
    #[prost(message, repeated, tag = "1")]
    pub argument_layouts: Vec<ShapeProto>,
    /// Whether arguments arrive as one tuple (field 2).
    #[prost(bool, tag = "2")]
    pub parameter_is_tupled_arguments: bool,
    /// Build options (field 3).
    #[prost(message, optional, tag = "3")]
    pub executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// Whether the executable may run on any device (field 4).
    #[prost(bool, tag = "4")]
    pub compile_portable_executable: bool,
}

/// `xla.ExecutableBuildOptionsProto` (the fields we read).
#[derive(Clone, PartialEq, Message)]
pub struct ExecutableBuildOptionsProto {
    /// Device ordinal, -1 for any (field 1).
    #[prost(int64, tag = "1")]
    pub device_ordinal: i64,
    /// XLA debug options (field 3).
    #[prost(message, optional, tag = "3")]
    pub debug_options: Option<DebugOptions>,
    /// Replicas (field 4).
    #[prost(int64, tag = "4")]
    pub num_replicas: i64,
    /// Partitions (field 5).
    #[prost(int64, tag = "5")]
    pub num_partitions: i64,
    /// Requested device assignment (field 9).
    #[prost(message, optional, tag = "9")]
    pub device_assignment: Option<DeviceAssignmentProto>,
}

/// `xla.DebugOptions` (the one field we read).
#[derive(Clone, PartialEq, Message)]
pub struct DebugOptions {
    /// `--xla_dump_to` (field 109).
    #[prost(string, optional, tag = "109")]
    pub xla_dump_to: Option<String>,
}

/// `xla.ShapeProto` (array shapes only).
#[derive(Clone, PartialEq, Message)]
pub struct ShapeProto {
    /// `xla.PrimitiveType` (field 2).
    #[prost(int32, tag = "2")]
    pub element_type: i32,
    /// Dimension sizes (field 3).
    #[prost(int64, repeated, tag = "3")]
    pub dimensions: Vec<i64>,
    /// Layout (field 5).
    #[prost(message, optional, tag = "5")]
    pub layout: Option<LayoutProto>,
}

/// `xla.LayoutProto` (the fields we check).
#[derive(Clone, PartialEq, Message)]
pub struct LayoutProto {
    /// Dimension order, most minor first (field 1).
    #[prost(int64, repeated, tag = "1")]
    pub minor_to_major: Vec<i64>,
    /// Tiles (field 6); we only count them.
    #[prost(message, repeated, tag = "6")]
    pub tiles: Vec<TileProto>,
}

/// `xla.TileProto`.
#[derive(Clone, PartialEq, Message)]
pub struct TileProto {
    /// Tile dimensions (field 1).
    #[prost(int64, repeated, tag = "1")]
    pub dimensions: Vec<i64>,
}

/// `xla.DeviceAssignmentProto`.
#[derive(Clone, PartialEq, Message)]
pub struct DeviceAssignmentProto {
    /// Replicas (field 1).
    #[prost(int32, tag = "1")]
    pub replica_count: i32,
    /// Computations (partitions) (field 2).
    #[prost(int32, tag = "2")]
    pub computation_count: i32,
    /// Per computation, the device of each replica (field 3).
    #[prost(message, repeated, tag = "3")]
    pub computation_devices: Vec<ComputationDevice>,
}

/// `xla.DeviceAssignmentProto.ComputationDevice`.
#[derive(Clone, PartialEq, Message)]
pub struct ComputationDevice {
    /// Device id per replica (field 1).
    #[prost(int64, repeated, tag = "1")]
    pub replica_device_ids: Vec<i64>,
}

/// What the compiler needs from the compile options.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// `debug_options.xla_dump_to`, when set and not a special value.
    pub dump_dir: Option<PathBuf>,
}

/// Decodes serialized compile options and rejects what one device cannot do.
pub fn parse(bytes: &[u8]) -> Result<Options> {
    let proto = CompileOptionsProto::decode(bytes)
        .map_err(|e| Error::invalid(format!("cannot decode xla.CompileOptionsProto: {e}")))?;
    let build = proto.executable_build_options.unwrap_or_default();
    for (what, n) in [
        ("replicas", build.num_replicas),
        ("partitions", build.num_partitions),
    ] {
        if n > 1 {
            return Err(Error::unimplemented(format!(
                "the wgpu plugin runs on one device; {n} {what} were requested"
            )));
        }
    }
    if proto.parameter_is_tupled_arguments {
        return Err(Error::unimplemented(
            "tupled arguments are not supported by the wgpu plugin",
        ));
    }
    if let Some(da) = &build.device_assignment {
        let ids: Vec<i64> = da
            .computation_devices
            .iter()
            .flat_map(|c| c.replica_device_ids.clone())
            .collect();
        if ids.iter().any(|&d| d != 0) {
            return Err(Error::invalid(format!(
                "device assignment {ids:?} names devices the wgpu client does not have (only 0)"
            )));
        }
    }
    for (i, shape) in proto.argument_layouts.iter().enumerate() {
        if let Some(l) = &shape.layout {
            let rank = shape.dimensions.len();
            let row_major = l.minor_to_major.is_empty()
                || (l.minor_to_major.len() == rank
                    && l.minor_to_major
                        .iter()
                        .enumerate()
                        .all(|(j, &d)| d == (rank - 1 - j) as i64));
            if !row_major || !l.tiles.is_empty() {
                return Err(Error::unimplemented(format!(
                    "argument {i}: layout minor_to_major={:?} is not supported; only dense row-major",
                    l.minor_to_major
                )));
            }
        }
    }
    let dump_dir = build
        .debug_options
        .and_then(|d| d.xla_dump_to)
        .filter(|d| !d.is_empty() && d != "-" && !d.starts_with("sponge"))
        .map(PathBuf::from);
    Ok(Options { dump_dir })
}

/// The serialized device assignment of a one-device executable: one replica, one computation,
/// device 0.
pub fn single_device_assignment() -> Vec<u8> {
    DeviceAssignmentProto {
        replica_count: 1,
        computation_count: 1,
        computation_devices: vec![ComputationDevice {
            replica_device_ids: vec![0],
        }],
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(build: ExecutableBuildOptionsProto) -> Vec<u8> {
        CompileOptionsProto {
            executable_build_options: Some(build),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn reads_dump_dir_and_rejects_replicas() {
        let bytes = options(ExecutableBuildOptionsProto {
            num_replicas: 1,
            num_partitions: 1,
            debug_options: Some(DebugOptions {
                xla_dump_to: Some("/tmp/d".into()),
            }),
            ..Default::default()
        });
        assert_eq!(
            parse(&bytes).unwrap().dump_dir,
            Some(PathBuf::from("/tmp/d"))
        );
        let bytes = options(ExecutableBuildOptionsProto {
            num_replicas: 2,
            ..Default::default()
        });
        assert_eq!(
            parse(&bytes).unwrap_err().kind,
            wgpu_hlo::ErrorKind::Unimplemented
        );
        assert_eq!(parse(&[]).unwrap(), Options::default());
        assert!(parse(&[0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn device_assignment_round_trips() {
        let da = DeviceAssignmentProto::decode(single_device_assignment().as_slice()).unwrap();
        assert_eq!(da.replica_count, 1);
        assert_eq!(da.computation_devices[0].replica_device_ids, vec![0]);
    }
}
