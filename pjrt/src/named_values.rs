//! `PJRT_NamedValue` lists: ones we own and hand out (attributes), and ones callers give us
//! (options).

use std::ffi::c_char;

use wgpu_hlo::{Error, Result};

use crate::abi::{slice, str_arg};
use crate::ffi::*;

/// A value of a named value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// `kString`.
    Str(String),
    /// `kInt64`.
    Int(i64),
    /// `kInt64List`.
    Ints(Vec<i64>),
    /// `kFloat`.
    Float(f32),
    /// `kBool`.
    Bool(bool),
}

/// An owned list of named values with a C view into it. The storage never changes after
/// construction, so the view's pointers stay valid as long as the list lives.
pub(crate) struct NamedValues {
    /// Owns the strings and arrays `view` points into.
    _items: Vec<(String, Value)>,
    view: Vec<PJRT_NamedValue>,
}

// SAFETY: the raw pointers in `view` point into `items`, which is never mutated after
// construction; sharing read-only views across threads is sound.
unsafe impl Send for NamedValues {}
// SAFETY: as above, the list is immutable once built.
unsafe impl Sync for NamedValues {}

impl NamedValues {
    /// Builds the list and its C view.
    pub(crate) fn new(items: Vec<(String, Value)>) -> Self {
        let view = items
            .iter()
            .map(|(name, value)| {
                let (type_, value, value_size) = match value {
                    Value::Str(s) => (
                        PJRT_NamedValue_Type::kString,
                        PJRT_NamedValue_Value {
                            string_value: s.as_ptr().cast::<c_char>(),
                        },
                        s.len(),
                    ),
                    Value::Int(i) => (
                        PJRT_NamedValue_Type::kInt64,
                        PJRT_NamedValue_Value { int64_value: *i },
                        1,
                    ),
                    Value::Ints(v) => (
                        PJRT_NamedValue_Type::kInt64List,
                        PJRT_NamedValue_Value {
                            int64_array_value: v.as_ptr(),
                        },
                        v.len(),
                    ),
                    Value::Float(f) => (
                        PJRT_NamedValue_Type::kFloat,
                        PJRT_NamedValue_Value { float_value: *f },
                        1,
                    ),
                    Value::Bool(b) => (
                        PJRT_NamedValue_Type::kBool,
                        PJRT_NamedValue_Value { bool_value: *b },
                        1,
                    ),
                };
                PJRT_NamedValue {
                    struct_size: PJRT_NamedValue::STRUCT_SIZE,
                    extension_start: std::ptr::null_mut(),
                    name: name.as_ptr().cast(),
                    name_size: name.len(),
                    type_,
                    value,
                    value_size,
                }
            })
            .collect();
        NamedValues {
            _items: items,
            view,
        }
    }

    /// Pointer to the first C named value (dangling but non-null when empty).
    pub(crate) fn as_ptr(&self) -> *const PJRT_NamedValue {
        self.view.as_ptr()
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.view.len()
    }
}

/// Copies a caller's named-value array.
///
/// # Safety
/// `ptr` is null with `len` 0 or points to `len` valid `PJRT_NamedValue`s whose strings and
/// arrays are readable during the call.
pub(crate) unsafe fn read_list(
    ptr: *const PJRT_NamedValue,
    len: usize,
) -> Result<Vec<(String, Value)>> {
    // SAFETY: per contract.
    let list = unsafe { slice(ptr, len, "named values") }?;
    let mut out = Vec::with_capacity(list.len());
    for nv in list {
        // SAFETY: per contract the name is readable.
        let name = unsafe { str_arg(nv.name, nv.name_size, "named value name") }?.to_string();
        // SAFETY: the union member read is the one `type_` names, per contract.
        let value = unsafe {
            match nv.type_ {
                PJRT_NamedValue_Type::kString => Value::Str(
                    str_arg(nv.value.string_value, nv.value_size, "named value")?.to_string(),
                ),
                PJRT_NamedValue_Type::kInt64 => Value::Int(nv.value.int64_value),
                PJRT_NamedValue_Type::kInt64List => Value::Ints(
                    slice(nv.value.int64_array_value, nv.value_size, "named value")?.to_vec(),
                ),
                PJRT_NamedValue_Type::kFloat => Value::Float(nv.value.float_value),
                PJRT_NamedValue_Type::kBool => Value::Bool(nv.value.bool_value),
                other => {
                    return Err(Error::invalid(format!(
                        "named value {name:?} has unknown type {}",
                        other.0
                    )))
                }
            }
        };
        out.push((name, value));
    }
    Ok(out)
}
