"""Group norm: ``aten.native_group_norm`` and ``native_group_norm_backward``.

Input ``[N, C, *spatial]`` (0 to 3 spatial dims); the channels split into
``groups`` groups (dividing C), each sample's group normalized over its
``C / groups x spatial`` elements; per-channel weight and bias (``[C]``).
Masks as layer norm's: 1 forward; 2 input, 4 weight, 8 bias gradient and
every combination (ATen's ``output_mask``, input, weight, bias). Affine
forms: weight and bias, weight only, neither. Statistics mean and rstd of
shape ``[N, groups]``, in the input's dtype (ATen's CPU kernel gives half
precision statistics for half inputs; float32 only with float32 parameters).

* forward (mask 1): (x, [weight], [bias]) -> (y, mean, rstd)
* backward: (grad_y, x, mean, rstd, [weight if affine and mask & 2])
  -> the requested gradients in the order input, weight, bias

Signature: ``normalized_shape`` is ``()``, ``groups`` the groups; key field
``g{groups}`` (``group_norm-f16-2x320x64x64-g32-wb-m14``). Dynamic dims: the
batch only (``["batch", 320, 64, 64]``); C is static, and so are the spatial
dims (docs/manifest.md, "Group norm": a dynamic reduction length, whose
backward iree-compile 3.13 does not build for llvm-cpu).

MIOpen commands ``groupnorm``, ``groupnormfp16``, ``groupnormbfp16`` (flags
``-n -c -D -H -W -g``, ``manifest/miopen.py``); ``-m 1`` means weight and bias.
Loader entry points: ``Bundle.native_group_norm`` and
``native_group_norm_backward`` (ATen's arguments; ``loader/entries/group_norm.py``).

Pure Python at import; torch only inside functions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

from .base import BIAS_GRAD, INPUT_GRAD, WEIGHT_GRAD, Op, dense, stats_as

MAX_SPATIAL = 3  # [N, C, D, H, W]: the kernels' ranks 2 to 5


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class GroupNorm(Op):
    name: str = "group_norm"
    masks: tuple[int, ...] = (1, 2, 4, 6, 8, 10, 12, 14)
    grads: tuple[int, ...] = (INPUT_GRAD, WEIGHT_GRAD, BIAS_GRAD)
    stats: tuple[str, ...] = ("mean", "rstd")
    has_bias: bool = True
    commands: tuple[tuple[str, str], ...] = (
        ("groupnorm", "float32"), ("groupnormfp16", "float16"), ("groupnormbfp16", "bfloat16"))
    autocast_aten: str = "aten::group_norm"
    format_version: int = 3  # loader/format.py OP_FORMAT_VERSION: older loaders refuse such bundles
    command_shape: str = "ncdhw"

    def default_stats_dtype(self, dtype: str) -> str:
        """The input's dtype, as ATen's CPU kernel gives them (checked: torch 2.13,
        float32, float16, bfloat16 and float64 inputs with parameters of their dtype)."""
        return dtype

    def zero_size_stat(self, name: str) -> float:
        return 0.0 if name == "mean" else super().zero_size_stat(name)

    # -- layout -----------------------------------------------------------------
    def lead_dims(self, input_shape, normalized_shape, groups):
        return 1  # a row is one sample: [C, *spatial]

    def param_shape(self, input_shape, normalized_shape, groups):
        return (input_shape[1],)

    def param_view(self, input_shape, normalized_shape, groups):
        return (input_shape[1],) + (1,) * (len(input_shape) - 2)

    def stats_shape(self, input_shape, normalized_shape, groups):
        return (input_shape[0], groups)

    def shape_problem(self, input_shape, normalized_shape, groups):
        if normalized_shape:
            return ("group_norm takes no normalized_shape: it normalizes groups of channels over "
                    "[C / groups, *spatial] (give groups)")
        rank = len(input_shape)
        if not 2 <= rank <= 2 + MAX_SPATIAL:
            return (f"group_norm needs an input [N, C, *spatial] of rank 2 to {2 + MAX_SPATIAL} (0 to "
                    f"{MAX_SPATIAL} spatial dims), got input_shape {list(input_shape)} (rank {rank})")
        if groups is None:
            return "group_norm needs groups: the number of channel groups, dividing C (input_shape[1])"
        if not _is_int(groups) or groups < 1:
            return f"groups must be a positive integer, got {groups!r}"
        c = input_shape[1]
        if isinstance(c, str):
            return f"the channels C (input_shape[1]) of group_norm must be static, got {c!r}"
        if c % groups:
            return f"groups {groups} does not divide the {c} channels (input_shape[1]) of {list(input_shape)}"
        return None

    def dynamic_dims_problem(self, input_shape, normalized_shape, groups):
        for i, d in enumerate(input_shape[1:], 1):
            if isinstance(d, str):
                what = "the channels C" if i == 1 else f"spatial dimension {i}"
                return (f"input_shape dimension {i} ({d!r}) is {what}: group_norm takes a dynamic batch only "
                        "(input_shape[0]); C and the spatial dims are static (a dynamic spatial dim makes the "
                        "reduction length dynamic, whose backward iree-compile 3.13 cannot build for llvm-cpu: "
                        "docs/manifest.md, \"Group norm\")")
        return None

    def default_normalized_shape(self, input_shape):
        return ()

    def key_part(self, normalized_shape, groups):
        return f"g{groups}"

    key_part_form = "g<groups>"

    def parse_key_part(self, text):
        if text.startswith("g") and text[1:].isdigit() and text[1:].isascii():
            return {"groups": int(text[1:], 10)}
        return None

    def family_shape(self, input_shape, normalized_shape, groups):
        return (1, input_shape[1]) + (1,) * (len(input_shape) - 2)

    def call_param(self, value):
        if not _is_int(value):
            raise TypeError(f"group must be an int, got {value!r}")
        return int(value)

    def call_fields(self, shape, param):
        if len(shape) < 2:
            raise ValueError(f"group_norm expects an input of at least 2 dims [N, C, *], got shape {list(shape)}")
        if len(shape) > 2 + MAX_SPATIAL:
            raise ValueError(f"group_norm kernels take 0 to {MAX_SPATIAL} spatial dims, got shape {list(shape)}")
        if param < 1 or shape[1] % param:
            raise ValueError(f"group {param} does not divide the {shape[1]} channels of the input {list(shape)}")
        return {"normalized_shape": (), "groups": param}

    def single_dispatch(self, sig):
        # one dispatch for a group norm forward fails to compile (iree-compile 3.13, llvm-cpu
        # and gfx942: "write affecting operations on global resources are restricted to
        # workgroup distributed contexts"): the statistics leave in another layout than
        # the rows they reduce ([N, groups] of [N, groups, C / groups x spatial])
        return False

    def eager_param(self, sig):
        return sig.groups

    # -- torch ----------------------------------------------------------------
    def implementation(self, impl: str) -> Callable:
        return _implementations()[impl]

    def forward64(self, sig, x, dims):
        import torch

        n, g = x.shape[0], sig.groups
        xg = x.reshape(n, g, -1)
        mean = xg.mean(dim=-1, keepdim=True)
        var = ((xg - mean) ** 2).mean(dim=-1, keepdim=True)
        rstd = 1.0 / torch.sqrt(var + sig.eps)
        return ((xg - mean) * rstd).reshape(x.shape), (mean.reshape(n, g), rstd.reshape(n, g))

    def eager_forward(self, sig, x, w, b):
        import torch

        n, c = x.shape[0], x.shape[1]
        # dense: ATen refuses a transposed input and misreads a strided weight or bias (base.dense)
        y, mean, rstd = torch.ops.aten.native_group_norm(dense(x), dense(w), dense(b), n, c, math.prod(x.shape[2:]),
                                                         sig.groups, sig.eps)
        return y, stats_as(torch, mean, sig), stats_as(torch, rstd, sig)

    def eager_backward(self, groups, mask, gy, x, mean, rstd, w, b=None):  # type: ignore[override]
        import torch

        want = [bool(mask & bit) for bit in self.grads]
        n, c, hw = x.shape[0], x.shape[1], math.prod(x.shape[2:])
        if want[1] and w is None:  # ATen needs a weight to size its gradient; its value is unused then
            w = torch.ones(c, dtype=x.dtype, device=x.device)
        dt = x.dtype
        # every tensor dense: ATen's CPU kernel misreads any other layout of each (base.dense),
        # such as the transposed grad_out autograd hands on for y = gn(x.transpose(1, 2)).transpose(1, 2)
        if gy.dtype == dt and (w is None or w.dtype == dt):
            # ATen's CPU kernel wants the statistics in the input's dtype
            outs = torch.ops.aten.native_group_norm_backward(
                dense(gy), dense(x), dense(mean.to(dt).reshape(n, groups)), dense(rstd.to(dt).reshape(n, groups)),
                dense(w), n, c, hw, groups, want)
            return tuple(o for o, wanted in zip(outs, want) if wanted)
        f = torch.float32  # mixed dtypes, which ATen refuses: all in float32
        outs = torch.ops.aten.native_group_norm_backward(
            dense(gy.to(f)), dense(x.to(f)), dense(mean.to(f).reshape(n, groups)), dense(rstd.to(f).reshape(n, groups)),
            None if w is None else dense(w.to(f)), n, c, hw, groups, want)
        return tuple(o.to(dt) for o, wanted in zip(outs, want) if wanted)

    def eager_route(self, sig, stats=None):
        """ATen's ops with the sizes, mask and dtypes decided here, once per call key (as
        layer norm's): the base route decides them per call, through ``eager_forward`` /
        ``eager_backward``. Every tensor dense (``base.dense``): ATen's CPU kernels misread
        any other layout. Mixed dtypes (a half input with float32 statistics) take the base route."""
        import torch

        aten, shape, g, eps = torch.ops.aten, sig.input_shape, sig.groups, sig.eps
        n, c, hw = shape[0], shape[1], math.prod(shape[2:])
        if sig.is_forward:
            forward, sd = aten.native_group_norm.default, getattr(torch, sig.stats_dtype)

            def run(x, w, b):
                y, mean, rstd = forward(dense(x), dense(w), dense(b), n, c, hw, g, eps)
                return (y, mean, rstd) if mean.dtype is sd else (y, mean.to(sd), rstd.to(sd))
            return run
        dt = getattr(torch, sig.dtype)
        if stats is None or any(t.dtype != dt for t in stats):
            return super().eager_route(sig, stats)
        backward, want = aten.native_group_norm_backward.default, [bool(sig.mask & bit) for bit in self.grads]
        if any(tuple(t.shape) != (n, g) for t in stats):  # the key pins their shape: ATen's, or another of as many
            def run_reshaped(gy, x, stats, w, b):
                mean, rstd = stats
                return backward(dense(gy), dense(x), dense(mean.reshape(n, g)), dense(rstd.reshape(n, g)), dense(w),
                                n, c, hw, g, want)
            return run_reshaped

        def run_backward(gy, x, stats, w, b):
            mean, rstd = stats
            return backward(dense(gy), dense(x), dense(mean), dense(rstd), dense(w), n, c, hw, g, want)
        return run_backward

    def eager_call(self, sig, x, w, b, grad_out, compiled):
        """``aten.native_group_norm`` / ``native_group_norm_backward`` with the output mask."""
        import torch

        aten, g, eps = torch.ops.aten, sig.groups, sig.eps
        n, c, hw = x.shape[0], x.shape[1], math.prod(x.shape[2:])
        if sig.is_forward:
            return (lambda x, w, b: aten.native_group_norm(x, w, b, n, c, hw, g, eps)), (x, w, b)
        _, mean, rstd = aten.native_group_norm(x, w, b, n, c, hw, g, eps)
        gy = grad_out()
        mask = [bool(sig.mask & bit) for bit in self.grads]
        if w is None and mask[1]:
            w = torch.ones(c, dtype=x.dtype)
        return (lambda gy, x, mean, rstd, w: aten.native_group_norm_backward(gy, x, mean, rstd, w, n, c, hw, g, mask),
                (gy, x, mean, rstd, w))

    def decompositions(self) -> tuple:
        # iree-compile 3.13's importer leaves a torch.constant.bool of ATen's group-norm
        # backward unlowered ("failed to legalize"): torch's own decomposition is exported
        import torch

        return (torch.ops.aten.native_group_norm_backward.default,)


GROUP_NORM = GroupNorm()


# ------------------------------------------------------ torch implementations
@functools.cache
def _implementations() -> dict[str, Callable]:
    """``aten`` calls the core ATen ops in float32 (ATen's opmath type; its CPU
    kernel wants one dtype for all tensors); ``manual`` writes the math out on
    ``[N, groups, C / groups, spatial]`` views and computes only the requested
    gradients. Half precision is computed in float32, rounded once."""
    import torch

    from .norm_math import col_sum_for, nan_if_inf, split_affine

    def sizes(x):
        return x.shape[0], x.shape[1], math.prod(x.shape[2:])

    def aten(m, *args):
        s, c = m.sig, m.compute
        if s.is_forward:
            x, w, b = split_affine(args, s)
            n, ch, hw = sizes(x)
            y, mean, rstd = torch.ops.aten.native_group_norm(
                x.to(c), None if w is None else w.to(c), None if b is None else b.to(c), n, ch, hw, s.groups, s.eps)
            return y.to(m.dtype), nan_if_inf(mean).to(m.stats_dtype), rstd.to(m.stats_dtype)
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        n, ch, hw = sizes(x)
        mask = [bool(s.mask & INPUT_GRAD), bool(s.mask & WEIGHT_GRAD), bool(s.mask & BIAS_GRAD)]
        if m.stats_dtype.itemsize < 4:  # as manual's: half-precision statistics lose an offset mean
            mean = x.to(c).reshape(n, s.groups, -1).mean(dim=-1)
        if w is None and (mask[1] or mask[2]):
            w = torch.ones(ch, dtype=m.dtype)  # sizes the parameters' gradients; its value is unused then
        dx, dw, db = torch.ops.aten.native_group_norm_backward(
            gy.to(c), x.to(c), mean.to(c), rstd.to(c), None if w is None else w.to(c), n, ch, hw, s.groups, mask)
        return m.grad_outputs(dx, dw, db)

    def manual(m, *args):
        s, c, g = m.sig, m.compute, m.sig.groups
        if s.is_forward:
            x, w, b = split_affine(args, s)
            n = x.shape[0]
            xg = x.to(c).reshape(n, g, -1)
            mean = xg.mean(dim=-1, keepdim=True)
            xm = xg - mean  # two-pass variance: stable under a large mean offset
            rstd = torch.rsqrt(xm.pow(2).mean(dim=-1, keepdim=True) + s.eps)
            y = (xm * rstd).reshape(x.shape)
            view = s.param_view
            if w is not None:
                y = y * w.to(c).reshape(view)
            if b is not None:
                y = y + b.to(c).reshape(view)
            return (y.to(m.dtype), nan_if_inf(mean.reshape(n, g)).to(m.stats_dtype),
                    rstd.reshape(n, g).to(m.stats_dtype))
        gy, x, mean, rstd, *rest = args
        w = rest[0] if rest else None
        n, ch = x.shape[0], s.input_shape[1]
        cg = ch // g
        # [N, groups, C / groups, spatial] views
        xv = x.to(c).reshape(n, g, cg, -1)
        if m.stats_dtype.itemsize < 4:
            # half-precision statistics (ATen's for half inputs) lose the mean of an offset
            # input (f16 at 128: steps of 0.125): it is recomputed from x, one more pass over
            # it; rstd keeps its relative precision and is used as given
            xm = xv - xv.mean(dim=(2, 3), keepdim=True)
        else:
            xm = xv - mean.to(c).reshape(n, g, 1, 1)
        rs = rstd.to(c).reshape(n, g, 1, 1)
        gyv = gy.to(c).reshape(n, g, cg, -1)
        dx = dw = db = None
        if s.mask & INPUT_GRAD:
            gw = gyv * w.to(c).reshape(1, g, cg, 1) if w is not None else gyv
            mean_g = gw.mean(dim=(2, 3), keepdim=True)
            mean_gxm = (gw * xm).mean(dim=(2, 3), keepdim=True)  # mean(g * xhat) / rstd
            dx = ((gw - mean_g - xm * (mean_gxm * (rs * rs))) * rs).reshape(x.shape)
        col_sum = col_sum_for(s)  # sums over the batch rows: contiguous adds (norm_math)
        if s.mask & WEIGHT_GRAD:
            # rstd applied after the sum over the spatial dims: the sum of the broadcast
            # product fails to distribute on gfx942 (iree-compile 3.13)
            dw = col_sum(((gyv * xm).sum(dim=-1) * rs.reshape(n, g, 1)).reshape(n, ch))
        if s.mask & BIAS_GRAD:
            db = col_sum(gyv.sum(dim=-1).reshape(n, ch))
        return m.grad_outputs(dx, dw, db)

    return {"aten": aten, "manual": manual}
