//! C enums of the PJRT C API as transparent `c_int` newtypes: a caller may pass any value, so
//! none of them is a Rust `enum` (an unknown discriminant would be undefined behaviour).

use std::ffi::c_int;

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $value:literal),* $(,)? }) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub c_int);
        impl $name {
            $(
                $(#[$vm])*
                #[doc = concat!("`", stringify!($name), "_", stringify!($variant), "` = ", $value, ".")]
                pub const $variant: $name = $name($value);
            )*
        }
    };
}

c_enum!(
    /// `PJRT_Error_Code`: absl status codes.
    PJRT_Error_Code {
        OK = 0,
        CANCELLED = 1,
        UNKNOWN = 2,
        INVALID_ARGUMENT = 3,
        DEADLINE_EXCEEDED = 4,
        NOT_FOUND = 5,
        ALREADY_EXISTS = 6,
        PERMISSION_DENIED = 7,
        RESOURCE_EXHAUSTED = 8,
        FAILED_PRECONDITION = 9,
        ABORTED = 10,
        OUT_OF_RANGE = 11,
        UNIMPLEMENTED = 12,
        INTERNAL = 13,
        UNAVAILABLE = 14,
        DATA_LOSS = 15,
        UNAUTHENTICATED = 16,
    }
);

c_enum!(
    /// `PJRT_NamedValue_Type`: which member of a `PJRT_NamedValue`'s union is set.
    PJRT_NamedValue_Type {
        kString = 0,
        kInt64 = 1,
        kInt64List = 2,
        kFloat = 3,
        kBool = 4,
    }
);

c_enum!(
    /// `PJRT_Buffer_Type`: element types of buffers.
    PJRT_Buffer_Type {
        INVALID = 0,
        PRED = 1,
        S8 = 2,
        S16 = 3,
        S32 = 4,
        S64 = 5,
        U8 = 6,
        U16 = 7,
        U32 = 8,
        U64 = 9,
        F16 = 10,
        F32 = 11,
        F64 = 12,
        BF16 = 13,
        C64 = 14,
        C128 = 15,
        F8E5M2 = 16,
        F8E4M3FN = 17,
        F8E4M3B11FNUZ = 18,
        F8E5M2FNUZ = 19,
        F8E4M3FNUZ = 20,
        S4 = 21,
        U4 = 22,
        TOKEN = 23,
        S2 = 24,
        U2 = 25,
        F8E4M3 = 26,
        F8E3M4 = 27,
        F8E8M0FNU = 28,
        F4E2M1FN = 29,
        S1 = 30,
        U1 = 31,
        F6E2M3FN = 32,
        F6E3M2FN = 33,
    }
);

c_enum!(
    /// `PJRT_HostBufferSemantics`: how long the runtime may read a host buffer.
    PJRT_HostBufferSemantics {
        kImmutableOnlyDuringCall = 0,
        kImmutableUntilTransferCompletes = 1,
        kImmutableZeroCopy = 2,
        kMutableZeroCopy = 3,
    }
);

c_enum!(
    /// `PJRT_Buffer_MemoryLayout_Type`: which member of a memory layout's union is set.
    PJRT_Buffer_MemoryLayout_Type {
        Tiled = 0,
        Strides = 1,
    }
);

c_enum!(
    /// `PJRT_Extension_Type`: the kind of an extension in the `extension_start` chain.
    PJRT_Extension_Type {
        Gpu_Custom_Call = 0,
        Profiler = 1,
        Custom_Partitioner = 2,
        Stream = 3,
        Layouts = 4,
        FFI = 5,
        MemoryDescriptions = 6,
        Triton = 7,
        RawBuffer = 8,
        PhaseCompile = 9,
        Example = 10,
        Unknown = 11,
        CrossHostTransfers = 12,
        ExecutableMetadata = 13,
        Callback = 14,
        HostAllocator = 15,
        TpuTopology = 16,
        TpuExecutable = 17,
        Megascale = 18,
        Shardings = 19,
        AbiVersion = 20,
        Collectives = 21,
        MultiSlice = 22,
        HostMemoryAllocator = 23,
        XlaTransform = 24,
    }
);

const _: () = assert!(std::mem::size_of::<PJRT_Buffer_Type>() == 4);
const _: () = assert!(std::mem::size_of::<PJRT_Error_Code>() == 4);
