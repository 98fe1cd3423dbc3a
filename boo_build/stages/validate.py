"""Validate: run a compiled kernel on seeded inputs and compare every output
with the float64 reference, under the rule in ``tolerances``.

Cases: each seed once as drawn (``seed0``) and once with a large mean offset
added to the input (``seed0+offset100`` in float32, ``+offset128`` in float16,
``+offset16`` in bfloat16): a naive one-pass variance (E[x^2] - E[x]^2) in
float32 loses several digits there. The offset is chosen per dtype so that the
shifted input stays representable with a few bits of its deviation left (see
``OFFSETS``).

Each output is checked with the tolerance of *its own* dtype: the data outputs
with the signature's dtype, the saved statistics (float32 by default) with
theirs, under the rule of ``tolerances``. The worst element is the one closest
to (or furthest past) its bound: ``ratio = |got - ref| / (floor + rtol * |ref|)``,
<= 1 passes; ``floor`` is ``atol * scale`` (``scale``: the RMS of the reference
output, ``tolerances.error_scale``), or, for an output that misses it, the
conditioning floor where that is larger (``reference.formula_errors``,
computed once per case and only then).

A result is ``passed`` only when the kernel ran on a device and every output
of every case was within tolerance; ``not run`` carries the reason there was
no device; ``error`` carries the runtime's message.

A dynamic kernel runs every case at several input shapes (``validation_shapes``;
the case name ends in ``@`` and the shape), each checked against the float64
reference of the static signature it runs as there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Callable, Iterator

from ..dtypes import Tolerance, tolerance
from ..errors import SignatureError
from ..records import EagerValidation, OutputCheck, ValidationResult, ValidationStatus, sort_ratio
from ..signature import KernelSignature, ModuleId, shape_text
from ..targets import Target
from . import tolerances
from .tolerances import error_scale

# Mean offset of the stress case, per input dtype. float32: 100 sigma, where a
# float32 E[x^2]-E[x]^2 is off by ~0.5 % of the variance (far past the
# tolerance) while a two-pass variance stays within it; at 1000 sigma even
# the float32 sum of the mean over a 1344-wide row is off by 1e-4 (seen on
# the default manifest), which no float32 kernel, eager ATen's included, meets. Half types keep the
# offset where the input's spacing is 1/8 of its standard deviation (float16:
# 128 has spacing 0.125; bfloat16: 16 has spacing 0.125) so that the shifted
# values stay distinct rather than all rounding to the offset.
OFFSETS = {"float32": 100.0, "float16": 128.0, "bfloat16": 16.0}

RULE = ("|got - ref| <= max(atol * rms(ref), factor * max(float32 formula error, dtype spacing at 0)) + rtol * |ref|, "
        "per output, tolerance of the output's dtype; the formula error only where the first floor is not met")


def tolerance_record(sig: KernelSignature) -> dict[str, Any]:
    dtypes = sorted({dt for _, _, dt in sig.outputs()})
    return {
        "rule": RULE,
        "by_dtype": {dt: {"atol": tolerance(dt).atol, "rtol": tolerance(dt).rtol} for dt in dtypes},
        "conditioning": {"factor": tolerances.FACTOR, "samples": tolerances.SAMPLES,
                         "unit_roundoff": tolerances.UNIT_ROUNDOFF},
    }


def cases(sig: KernelSignature, seeds=(0,), offset_case: bool = True) -> list[tuple[str, int, float]]:
    """(case name, seed, offset) for each case validated."""
    out = []
    for s in seeds:
        out.append((f"seed{s}", s, 0.0))
        if offset_case:
            off = OFFSETS[sig.dtype]
            out.append((f"seed{s}+offset{off:g}", s, off))
    return out


# Rows of a dynamic kernel's largest validation shape: at least this many
# ("several thousand"), and more than any shape of its width in the manifest.
LARGE_ROWS = 4096
PRIME_ROWS = 37  # each dynamic dim alone at a prime, the others at 1


def _next_prime(n: int) -> int:
    """The smallest prime >= n."""
    n = max(n, 2)
    while any(n % p == 0 for p in range(2, int(n ** 0.5) + 1)):
        n += 1
    return n


def validation_shapes(sig: KernelSignature, more_than_rows: int = 0) -> tuple[tuple[int, ...], ...]:
    """Input shapes a dynamic signature is validated at (() when static), each
    within its bounds:

    * every dynamic dim 1 (one row when the leading dims are all dynamic);
    * each dynamic dim alone at ``PRIME_ROWS`` (a prime), the others 1: batch
      and sequence vary separately;
    * the large case: more rows than ``more_than_rows`` (the manifest's largest
      shape of this width) and at least ``LARGE_ROWS``, spread as 3 on the first
      name (if there are two or more) and a prime on the last.
    """
    if not sig.is_dynamic:
        return ()
    names, bounds = sig.dim_names, sig.dim_bounds()
    ones = dict.fromkeys(names, 1)
    wanted = [ones] + [{**ones, n: PRIME_ROWS} for n in names]
    n_norm = len(sig.normalized_shape)
    static = 1
    for d in sig.input_shape[: len(sig.input_shape) - n_norm]:
        static *= d if isinstance(d, int) else 1
    rows = max(LARGE_ROWS, more_than_rows + 1)
    large = dict(ones)
    if len(names) > 1:
        large[names[0]] = 3
    spread = static * (3 if len(names) > 1 else 1)
    large[names[-1]] = _next_prime(-(-rows // spread))
    wanted.append(large)
    shapes: list[tuple[int, ...]] = []
    for sizes in wanted:
        sizes = {n: min(v, bounds[n]) for n, v in sizes.items()}
        while True:  # several names at their bounds can still pass max_elements together
            try:
                shapes.append(sig.sized(sizes).input_shape)  # type: ignore[arg-type]  # static: ints
                break
            except SignatureError:
                top = max(sizes, key=sizes.__getitem__)
                if sizes[top] == 1:
                    break
                sizes[top] = max(1, sizes[top] // 2)
    return tuple(dict.fromkeys(shapes))


def _all_cases(sig: KernelSignature, seeds, offset_case: bool, shapes):
    """(case name, seed, offset, static signature it runs as) of every case."""
    if not sig.is_dynamic:
        return [(case, seed, off, sig) for case, seed, off in cases(sig, seeds, offset_case)]
    out = []
    for shape in shapes if shapes is not None else validation_shapes(sig):
        bound = sig.bind(shape)
        out += [(f"{case}@{shape_text(shape)}", seed, off, bound) for case, seed, off in cases(bound, seeds, offset_case)]
    return out


def compare(name: str, case: str, got, expected, tol: Tolerance, dtype: str = "",
            formula_error: float | Callable[[], float] | None = None) -> OutputCheck:
    """Check one output (torch tensors; ``expected`` in float64) under ``tol``
    (``tolerances``): the scale floor first; where it is not met and
    ``formula_error`` is given (the float32 formula's error on this output, or
    a function that computes it), the conditioning floor too."""
    import torch

    g = got.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if tuple(g.shape) != tuple(e.shape):
        return OutputCheck(name, case, math.inf, math.inf, (), math.nan, math.nan, False, math.inf, dtype)
    if e.numel() == 0:
        return OutputCheck(name, case, 0.0, 0.0, (), 0.0, 0.0, True, 0.0, dtype)
    err = (g - e).abs()
    err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)  # NaN counts as infinitely wrong
    ref_abs = e.abs()
    scale = error_scale(e)
    floor, bound_name = tolerances.floor(tol, scale, None, dtype)
    fe = None
    if not bool((err <= floor + tol.rtol * ref_abs).all()) and formula_error is not None:
        fe = float(formula_error() if callable(formula_error) else formula_error)
        floor, bound_name = tolerances.floor(tol, scale, fe, dtype)
    bound = floor + tol.rtol * ref_abs
    ratio = err / bound
    flat = int(torch.argmax(ratio))
    index = tuple(int(i) for i in _unravel(flat, tuple(e.shape)))
    worst_ratio = float(ratio.reshape(-1)[flat])
    rel = err / torch.clamp(ref_abs, min=tol.atol * scale)
    return OutputCheck(
        name=name, case=case, max_abs=float(err.max()), max_rel=float(rel.max()), worst_index=index,
        got=float(g.reshape(-1)[flat]), expected=float(e.reshape(-1)[flat]),
        ok=bool((err <= bound).all()), ratio=worst_ratio, dtype=dtype, bound=bound_name, formula_error=fe,
    )


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for d in reversed(shape):
        idx.append(flat % d)
        flat //= d
    return list(reversed(idx))


def validate_kernel(vmfb: bytes, mid: ModuleId, target: Target, device, *, seeds=(0,),
                    offset_case: bool = True, torch_device: str | None = None,
                    shapes=None) -> ValidationResult:
    """Run ``vmfb`` (``mid`` compiled for ``target``) on ``device`` (a
    ``loader.devices.DeviceInfo``, or None: not run) and compare with the reference.

    ``torch_device`` ("cuda:0"): a GPU's inputs go to the kernel as torch
    tensors there (the loader's zero-copy path) and the float64 reference is
    computed there too; without it GPU inputs are staged from host arrays.

    ``shapes``: input shapes of a dynamic kernel's cases (default
    ``validation_shapes(sig)``)."""
    sig = mid.signature
    tol_rec = tolerance_record(sig)
    base: dict[str, Any] = dict(module=mid.key, target=target.name, tolerance=tol_rec)
    if device is None:
        from ..loader.devices import discover, match_target, no_device_reason

        _, why = match_target(target, discover(gpus=False)) if target.is_cpu else (None, "")
        return ValidationResult.not_run(mid.key, target.name, why or no_device_reason(target.arch), tol_rec)

    from ..loader.hal import open_device
    from ..loader.invoke import KernelRunner
    from .torch_modules import sample_args

    try:
        runner = KernelRunner(open_device(device.uri), vmfb, mid.func_name)
    except Exception as e:  # noqa: BLE001 - a vmfb the runtime rejects is an error, not a crash
        return ValidationResult(status=ValidationStatus.ERROR, reason=f"load failed: {type(e).__name__}: {_first_line(e)}", **base)

    def run(csig, seed, offset):
        args = sample_args(csig, seed, offset)
        if torch_device is not None and not device.is_cpu:
            args = tuple(a.to(torch_device) for a in args)
        return runner(*_to_device(args, device)), args

    result = _checked(sig, run, base, seeds, offset_case, shapes, "kernel")
    if getattr(device, "software", False):  # lavapipe: the numerics and the host side, not a GPU
        result = dataclasses.replace(result, software=device.arch)
    return result


def validate_eager(sig: KernelSignature, target: str = "cpu", *, torch_device: str | None = None, seeds=(0,),
                   offset_case: bool = True, shapes=None) -> ValidationResult:
    """torch eager as the loader runs torch calls it sends to torch
    (``Op.eager_route``), on ``torch_device`` (default the CPU), checked like a kernel on the same cases:
    the build sends torch calls to torch only where this passes. ATen's CPU
    kernels do not always meet the kernels' tolerances (its half-precision
    layer-norm backward sums the weight and bias gradients in half precision:
    bf16 1024x768, grad_bias 7x its bound)."""
    from .. import ops
    from .torch_modules import sample_args

    op = ops.get(sig.op)
    base = dict(module=f"{sig.key}-eager", target=target, tolerance=tolerance_record(sig))

    def drawn(csig, seed, offset):
        return tuple(a.to(torch_device or "cpu") for a in sample_args(csig, seed, offset))

    def run(csig, seed, offset):
        args = drawn(csig, seed, offset)
        res = csig.residual
        if csig.is_forward:
            lead = args[:2] if res else args[:1]
            w, b = (args[len(lead):] + (None, None))[:2]
            return (op.residual_route if res else op.eager_route)(csig)(*lead, w, b), args
        # a backward call passes the weight (and bias) whatever the mask: the forward's, as drawn
        fwd = drawn(csig.replace(mask=1), seed, offset)
        w, b = (fwd[2 if res else 1:] + (None, None))[:2]
        stats = tuple(args[2:2 + len(op.stats)])
        params = (w if csig.affine else None, b if csig.affine and csig.bias else None)
        if res:
            grads = op.residual_route(csig, stats)(args[0], args[1], stats, *params, args[-1])
        else:
            grads = op.eager_route(csig, stats)(args[0], args[1], stats, *params)
        return [g for g, bit in zip(grads, op.grads) if csig.mask & bit], args

    return _checked(sig, run, base, seeds, offset_case, shapes, "torch eager")


def eager_record(sig: KernelSignature, target: str = "cpu", bench_shapes=(), *,
                 torch_device: str | None = None) -> EagerValidation:
    """``validate_eager``'s verdict for a bench record, and for a dynamic
    signature ``by_rows``, ``((rows, passed), ...)`` over its
    validation shapes and ``bench_shapes`` (where the loader decides per size:
    ATen's half-precision sums over rows pass at a few rows and fail at
    thousands)."""
    shapes, seeds = None, (0,)
    if sig.is_dynamic:
        shapes = tuple(dict.fromkeys(validation_shapes(sig) + tuple(tuple(s) for s in bench_shapes)))
    v = validate_eager(sig, target, torch_device=torch_device, seeds=seeds, shapes=shapes)
    if not (shapes and v.status in (ValidationStatus.PASSED, ValidationStatus.FAILED)):
        return EagerValidation(v.status, v.reason)
    rows = {case: csig.rows for case, _, _, csig in _all_cases(sig, seeds, True, shapes)}
    ok: dict[int, bool] = {}
    for c in v.outputs:
        ok[rows[c.case]] = ok.get(rows[c.case], True) and c.ok
    return EagerValidation(v.status, v.reason, tuple((r, ok[r]) for r in sorted(ok)))


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's CPU ops on one intra-op thread in the calling thread while it lasts.

    Why: a float reduction torch splits over threads adds in an order that depends
    on the thread count, so the drawn inputs' statistics, the float64 reference
    and the error scale, and with them the recorded figures and the bundle's
    bytes, would differ between a 2-core and a 16-core machine, and between a
    local and a Dask build. The thread count is per thread under OpenMP (the
    build's other threads keep theirs); the shapes validated are small."""
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _checked(sig, run, base: dict, seeds, offset_case: bool, shapes, what: str) -> ValidationResult:
    """Every case of ``sig`` run by ``run(static sig, seed, offset) -> (outputs,
    the arguments it ran on)`` and compared with the float64 reference, torch on
    one thread (``one_torch_thread``)."""
    with one_torch_thread():
        return _checked_cases(sig, run, base, seeds, offset_case, shapes, what)


def _checked_cases(sig, run, base: dict, seeds, offset_case: bool, shapes, what: str) -> ValidationResult:
    from .reference import reference

    checks: list[OutputCheck] = []
    for case, seed, offset, csig in _all_cases(sig, seeds, offset_case, shapes):
        outputs_spec = csig.outputs()
        try:
            got, args = run(csig, seed, offset)
        except Exception as e:  # noqa: BLE001
            return ValidationResult(status=ValidationStatus.ERROR, reason=f"{case}: {type(e).__name__}: {_first_line(e)}",
                                    outputs=tuple(checks), **base)
        if len(got) != len(outputs_spec):
            return ValidationResult(
                status=ValidationStatus.FAILED, outputs=tuple(checks),
                reason=f"{case}: {what} returned {len(got)} outputs, the signature has {len(outputs_spec)}", **base)
        expected = reference(csig, args)
        formula = _FormulaErrors(csig, args, expected)
        for k, ((name, shape, dtype), g, ref) in enumerate(zip(outputs_spec, got, expected)):
            g = _to_torch(g)
            if tuple(g.shape) != tuple(shape) or _dtype_name(g) != dtype:
                return ValidationResult(
                    status=ValidationStatus.FAILED, outputs=tuple(checks),
                    reason=f"{case}: {name} is {_dtype_name(g)}{list(g.shape)}, expected {dtype}{list(shape)}",
                    **base)
            checks.append(compare(name, case, g, ref, tolerance(dtype), dtype, formula.of(k)))
    bad = [c for c in checks if not c.ok]
    if bad:
        worst = max(bad, key=lambda c: sort_ratio(c.ratio))
        more = f" (and {len(bad) - 1} more output check(s) out of tolerance)" if len(bad) > 1 else ""
        return ValidationResult(status=ValidationStatus.FAILED, reason=worst.describe() + more, outputs=tuple(checks), **base)
    return ValidationResult(status=ValidationStatus.PASSED, reason="", outputs=tuple(checks), **base)


class _FormulaErrors:
    """``reference.formula_errors`` of one case, computed on first use: only an
    output that misses the scale floor needs them."""

    def __init__(self, sig: KernelSignature, args, expected):
        self.sig, self.args, self.expected = sig, args, expected
        self.errors: tuple[float, ...] | None = None

    def of(self, k: int) -> Callable[[], float]:
        def get() -> float:
            if self.errors is None:
                from .reference import formula_errors

                self.errors = formula_errors(self.sig, self.args, self.expected)
            return self.errors[k]
        return get


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:500]


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")  # torch.bfloat16 -> "bfloat16", the signature's spelling


def _to_device(args, device):
    """Torch tensors for CPU devices and torch GPU tensors (the zero-copy path
    the loader uses); else numpy arrays for GPUs (host staging, works without
    a GPU build of torch)."""
    if device.is_cpu or args[0].device.type != "cpu":
        return args
    return tuple(_to_numpy(a) for a in args)


def _to_numpy(t):
    """A CPU tensor as numpy (bfloat16 as ml_dtypes.bfloat16): the loader's conversion."""
    from ..loader.arrays import numpy_from_torch

    return numpy_from_torch(t)


def _to_torch(x):
    """A kernel output as a torch tensor (numpy outputs of host-staged GPU calls)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x
    from ..loader.arrays import torch_from_numpy

    return torch_from_numpy(x)
