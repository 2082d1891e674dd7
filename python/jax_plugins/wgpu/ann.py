"""`approx_max_k` / `approx_min_k` on wgpu: the exact top-k, as XLA's cpu and gpu backends give it.

JAX lowers `approx_top_k` to an `ApproxTopK` custom call everywhere but on TPU, and XLA's
non-TPU backends replace that call with an exact sort and slice (its "fallback"). The recall
target only permits approximation; exact results satisfy it. So on wgpu the primitive lowers
to a stable sort of (value, index) along the reduction dimension and a slice to the output size
JAX computed (k when `aggregate_to_topk`, else XLA's approximate output size).
"""

from __future__ import annotations


def _exact_top_k(operand, *, k, reduction_dimension, recall_target, is_max_k,
                 reduction_input_size_override, aggregate_to_topk, out_size):
    import jax.numpy as jnp
    from jax import lax

    del k, recall_target, reduction_input_size_override, aggregate_to_topk
    dim = reduction_dimension % operand.ndim
    index = lax.broadcasted_iota(jnp.int32, operand.shape, dim)
    # Ascending total order on the key; stable, so equal values keep the lower index first.
    key = -operand if is_max_k else operand
    _, idx = lax.sort((key, index), dimension=dim, is_stable=True, num_keys=1)
    idx = lax.slice_in_dim(idx, 0, out_size, axis=dim)
    values = jnp.take_along_axis(operand, idx, axis=dim)
    return values, idx


def _rule(ctx, operand, **params):
    dim = params["reduction_dimension"] % len(ctx.avals_in[0].shape)
    out_size = ctx.avals_out[0].shape[dim]
    from .lowerings import lower_fun

    return lower_fun(
        lambda x: _exact_top_k(x, out_size=out_size, **params), multiple_results=True
    )(ctx, operand)


def register(platform: str) -> None:
    from jax._src.interpreters import mlir
    from jax._src.lax import ann

    mlir.register_lowering(ann.approx_top_k_p, _rule, platform=platform)
