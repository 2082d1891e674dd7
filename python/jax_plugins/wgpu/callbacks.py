"""Host callbacks on `wgpu`: `jax.debug.print`, `jax.debug.callback`, `jax.pure_callback` and
`jax.experimental.io_callback` inside jitted code, and ops run on the host (`host_op`).

JAX lowers its callback primitives only for `cpu`, `cuda`, `rocm` and `tpu`. For `wgpu` the
rules here emit `stablehlo.custom_call @wgpu.host_callback` whose `backend_config` is the id
of a Python callable held in this module's registry. The compiled program keeps that call as
a host step: at run time the library submits the device work before it, reads the operands
back and calls the handler registered through `wgpu_hlo_set_host_callback_handler` (a ctypes
callback, which takes the GIL for the call only; jaxlib releases the GIL around `Execute`),
which finds the callable by id, runs it on numpy arrays and writes the results back; the
program then continues in the same `Execute`.

Lifetime: the registry entry lives as long as the executable. Each lowering adds a keepalive
object to the module context (JAX keeps those with the executable, as it does for its own
callbacks); when the executable goes, the keepalive goes and takes the entry with it.

Ordering: ordered effects (`io_callback(..., ordered=True)`, `jax.debug.print(...,
ordered=True)`) thread a token through the call exactly as JAX's own `emit_python_callback`
does; the compiler turns tokens into empty tensors, so loops and branches carry them and the
calls keep their order. Every host call has a side effect unless it is a `pure_callback`.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import threading
import traceback
from typing import Any, Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)

TARGET = "wgpu.host_callback"
"""The `custom_call` target of a host call (the library's `HOST_CALLBACK_TARGET`)."""

HOST_OPS_ENV = "WGPU_HLO_HOST_OPS"
"""`WGPU_HLO_HOST_OPS=error` makes an op that would run on the host a lowering error."""


class _Entry:
    """A registered host function with the types of its operands and results."""

    __slots__ = ("fn", "in_avals", "out_avals", "token", "name", "host_ops")

    def __init__(self, fn, in_avals, out_avals, token, name, host_ops):
        self.fn = fn
        self.in_avals = list(in_avals)
        self.out_avals = list(out_avals)
        self.token = token
        self.name = name
        self.host_ops = host_ops


_lock = threading.Lock()
_ids = itertools.count(1)
_registry: dict[int, _Entry] = {}


class _Keepalive:
    """Owns a registry entry: dropped with the executable, it removes the entry."""

    __slots__ = ("id", "__weakref__")

    def __init__(self, entry_id: int):
        self.id = entry_id

    def __del__(self):
        registry = _registry
        if registry is not None:
            registry.pop(self.id, None)


class _HostOps:
    """The ops of one executable that run on the host: warned about once, at the first call."""

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.names: list[str] = []
        self.warned = False

    def note_call(self):
        if self.warned:
            return
        self.warned = True
        logger.warning(
            "%s: %s ran on the host (numpy/scipy), not on the wgpu device; set %s=error to "
            "make this an error",
            self.module_name,
            ", ".join(self.names),
            HOST_OPS_ENV,
        )


def registered() -> int:
    """How many host functions are registered now (for tests of their lifetime)."""
    return len(_registry)


# --- the handler the library calls -----------------------------------------------------------

_HANDLER_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_uint64,
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.c_void_p,
    ctypes.c_size_t,
)


def _from_host(ptr, size: int, aval) -> np.ndarray:
    dtype = np.dtype(aval.dtype)
    shape = tuple(aval.shape)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size != expected:
        raise RuntimeError(f"operand of {size} bytes for {dtype}{list(shape)} ({expected} bytes)")
    if size == 0:
        return np.zeros(shape, dtype)
    raw = (ctypes.c_char * size).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def _to_host(value, ptr, size: int, index: int, aval) -> None:
    dtype = np.dtype(aval.dtype)
    shape = tuple(aval.shape)
    out = np.asarray(value)
    if out.shape != shape:
        raise RuntimeError(
            f"Incorrect output shape for return value #{index}: Expected: {shape}, Actual: "
            f"{out.shape}"
        )
    if out.dtype != dtype:
        raise RuntimeError(
            f"Incorrect output dtype for return value #{index}: Expected: {dtype}, Actual: "
            f"{out.dtype}"
        )
    out = np.ascontiguousarray(out)
    if out.nbytes != size:
        raise RuntimeError(f"result #{index}: {out.nbytes} bytes, the program expects {size}")
    if size:
        ctypes.memmove(ptr, out.ctypes.data, size)


def _call(entry_id, num_args, arg_data, arg_sizes, num_results, result_data, result_sizes):
    entry = _registry.get(entry_id)
    if entry is None:
        raise RuntimeError(f"host callback #{entry_id} is not registered (its executable is gone)")
    skip = 1 if entry.token else 0
    if num_args != skip + len(entry.in_avals) or num_results != skip + len(entry.out_avals):
        raise RuntimeError(
            f"{entry.name}: called with {num_args} operands and {num_results} results, made for "
            f"{len(entry.in_avals)} and {len(entry.out_avals)}"
        )
    args = [
        _from_host(arg_data[skip + i], arg_sizes[skip + i], aval)
        for i, aval in enumerate(entry.in_avals)
    ]
    if entry.host_ops is not None:
        entry.host_ops.note_call()
    outs = entry.fn(*args)
    outs = () if outs is None else tuple(outs)
    if len(outs) != len(entry.out_avals):
        raise RuntimeError(
            "Mismatched number of outputs from callback. "
            f"Expected: {len(entry.out_avals)}, Actual: {len(outs)}"
        )
    for i, (value, aval) in enumerate(zip(outs, entry.out_avals)):
        _to_host(value, result_data[skip + i], result_sizes[skip + i], i, aval)


def _handle(entry_id, num_args, arg_data, arg_sizes, num_results, result_data, result_sizes,
            error, error_capacity):
    try:
        _call(entry_id, num_args, arg_data, arg_sizes, num_results, result_data, result_sizes)
        return 0
    except BaseException:  # noqa: BLE001 - every failure goes back to the caller of Execute
        try:
            msg = traceback.format_exc().encode("utf-8", "replace")
            msg = msg[-(error_capacity - 1):] if error_capacity > 1 else b""
            if error and error_capacity:
                ctypes.memmove(error, msg + b"\0", len(msg) + 1)
        except BaseException:  # noqa: BLE001 - never raise into the library
            pass
        return 1


_handler = _HANDLER_TYPE(_handle)
_installed = False
_install_lock = threading.Lock()


def _library_path() -> str:
    """The loaded plugin library: the one `PJRT_NAMES_AND_LIBRARY_PATHS` names for `wgpu`,
    else the package's (dlopen of the same path returns the library JAX loaded)."""
    from . import PLATFORM, library_path

    for item in os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "").split(","):
        name, sep, path = item.partition(os.path.pathsep)
        if sep and name.strip() == PLATFORM:
            return path.strip()
    return str(library_path())


def install_handler() -> None:
    """Registers this module's handler with the library (once per process)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        lib = ctypes.CDLL(_library_path())
        setter = lib.wgpu_hlo_set_host_callback_handler
        setter.argtypes = [_HANDLER_TYPE]
        setter.restype = ctypes.c_int32
        if setter(_handler) != 0:
            raise RuntimeError("libpjrt_wgpu refused the host-callback handler")
        _installed = True


# --- lowering ---------------------------------------------------------------------------------


def _module_name(module_ctx) -> str:
    try:
        from jax._src.lib.mlir import ir

        return ir.StringAttr(module_ctx.module.operation.attributes["sym_name"]).value
    except Exception:  # noqa: BLE001 - the name only decorates a warning
        return "a wgpu executable"


def emit_host_call(
    ctx,
    fn: Callable[..., Sequence[Any]],
    token,
    operands: Sequence[Any],
    operand_avals: Sequence[Any],
    result_avals: Sequence[Any],
    *,
    has_side_effect: bool,
    name: str = "host callback",
    host_op: str | None = None,
):
    """Emits a host call of `fn` (numpy arrays in, a sequence of arrays out) on `operands`.

    With a `token`, the call takes it first and returns a new one first (ordered effects).
    Returns `(results, token)`. `host_op` names an op of the program run on the host (noted in
    the executable's warning)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir.dialects import hlo

    install_handler()
    module_ctx = ctx.module_context
    host_ops = None
    if host_op is not None:
        host_ops = next((k for k in module_ctx.keepalives if isinstance(k, _HostOps)), None)
        if host_ops is None:
            host_ops = _HostOps(_module_name(module_ctx))
            module_ctx.add_keepalive(host_ops)
        if host_op not in host_ops.names:
            host_ops.names.append(host_op)
    with _lock:
        entry_id = next(_ids)
        _registry[entry_id] = _Entry(
            fn, operand_avals, result_avals, token is not None, name, host_ops
        )
    module_ctx.add_keepalive(_Keepalive(entry_id))
    result_types = [mlir.aval_to_ir_type(module_ctx, a) for a in result_avals]
    operands = list(operands)
    if token is not None:
        operands = [token, *operands]
        result_types = [hlo.TokenType.get(), *result_types]
    op = mlir.custom_call(
        TARGET,
        result_types=result_types,
        operands=operands,
        backend_config=str(entry_id),
        has_side_effect=has_side_effect,
        api_version=1,
    )
    results = list(op.results)
    if token is not None:
        token, *results = results
    return results, token


def _pure_callback_rule(ctx, *args, callback, sharding, **params):
    from jax._src import callback as cb

    del sharding  # one device

    def fn(*flat_args):
        return tuple(cb.pure_callback_impl(*flat_args, callback=callback, sharding=None, **params))

    results, _ = emit_host_call(
        ctx, fn, None, args, ctx.avals_in, ctx.avals_out, has_side_effect=False,
        name="jax.pure_callback",
    )
    return results


def _io_callback_rule(ctx, *args, callback, sharding, ordered, **params):
    from jax._src import callback as cb
    from jax._src.interpreters import mlir

    del sharding  # one device

    def fn(*flat_args):
        return tuple(
            cb.io_callback_impl(
                *flat_args, callback=callback, sharding=None, ordered=ordered, **params
            )
        )

    if ordered:
        effect = cb._OrderedIOEffect
        results, token = emit_host_call(
            ctx, fn, ctx.tokens_in.get(effect), args, ctx.avals_in, ctx.avals_out,
            has_side_effect=True, name="io_callback",
        )
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: token})))
        return results
    results, _ = emit_host_call(
        ctx, fn, None, args, ctx.avals_in, ctx.avals_out, has_side_effect=True,
        name="io_callback",
    )
    return results


def _debug_rule(ctx, args, effect, impl, name):
    from jax._src import effects
    from jax._src.interpreters import mlir

    def fn(*flat_args):
        impl(*flat_args)
        return ()

    if effects.ordered_effects.contains(effect):
        results, token = emit_host_call(
            ctx, fn, ctx.tokens_in.get(effect), args, ctx.avals_in, ctx.avals_out,
            has_side_effect=True, name=name,
        )
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: token})))
        return results
    results, _ = emit_host_call(
        ctx, fn, None, args, ctx.avals_in, ctx.avals_out, has_side_effect=True, name=name
    )
    return results


def _debug_callback_rule(ctx, *args, effect, partitioned, callback, **params):
    from jax._src import debugging

    def impl(*flat_args):
        debugging.debug_callback_p.impl(
            *flat_args, effect=effect, partitioned=partitioned, callback=callback, **params
        )

    return _debug_rule(ctx, args, effect, impl, "jax.debug.callback")


def _debug_print_rule(ctx, *args, **params):
    from jax._src import debugging

    effect = debugging.ordered_debug_effect if params["ordered"] else debugging.debug_effect

    def impl(*flat_args):
        debugging.debug_print_p.impl(*flat_args, **params)

    return _debug_rule(ctx, args, effect, impl, "jax.debug.print")


def _check_rule(ctx, *args, err_tree, debug):
    """`checkify.check` staged without `checkify.checkify` (`jax.experimental.checkify`):
    as on cpu and gpu, a host call that raises the error when its predicate holds (with
    `jax_xla_runtime_errors`), nothing for a debug check; JAX registers no rule for other
    platforms, so `checkify.debug_check` in jitted code failed to lower on wgpu."""
    import functools

    from jax._src import checkify
    from jax._src import config

    if debug:
        return []
    if not config.xla_runtime_errors.value:
        raise checkify.functionalization_error
    results, _ = emit_host_call(
        ctx, functools.partial(checkify.python_err, err_tree), None, args, ctx.avals_in,
        ctx.avals_out, has_side_effect=True, name="checkify.check",
    )
    return results


def _rules():
    from jax._src import callback as cb
    from jax._src import debugging

    rules = [
        (cb.pure_callback_p, _pure_callback_rule),
        (cb.io_callback_p, _io_callback_rule),
        (debugging.debug_callback_p, _debug_callback_rule),
    ]
    debug_print_p = getattr(debugging, "debug_print_p", None)
    if debug_print_p is not None:
        rules.append((debug_print_p, _debug_print_rule))
    try:
        from jax._src import checkify

        rules.append((checkify.check_p, _check_rule))
    except (ImportError, AttributeError):  # pragma: no cover - older or newer jax
        pass
    return rules


def register(platform: str) -> None:
    """Installs the callback lowering rules for `platform` (not cached: every lowering gets
    its own registry entry, as JAX's own callback rules do)."""
    from jax._src.interpreters import mlir

    for primitive, rule in _rules():
        mlir.register_lowering(primitive, rule, platform=platform, cacheable=False)
