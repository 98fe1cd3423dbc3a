"""Which of a bundle's kernels serves a call, on the target the bundle was opened for.

A call's signature is looked up by its exact key first; then among static
kernels that differ only where the call cannot tell (``_relaxed_key``); then
among dynamic kernels of its family (``family_key``) whose bounds take its
shape. When none does, ``not_found`` says why, with the nearest keys.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from .. import ops
from ..errors import SignatureError
from ..ops.base import DEFAULT_EPS
from ..shapes import log_rows, nearest_in_rows
from ..signature import KernelSignature
from .errors import KernelNotFound
from .memo import remember
from .nearest import nearest_keys
from .split_format import Frame


def _per_size(verdict: Any) -> tuple | None:
    """A routes verdict given per timed size (``[[rows, baseline faster], ...]``) as ``log_rows``; None
    where it is one decision for every size (or none)."""
    return log_rows((r, bool(won)) for r, won in verdict) if isinstance(verdict, list) and verdict else None


class BundledKernel:
    """One signature's selected implementation (module) on the bundle's target,
    from its routes entry (``split_format``): where the module lies, the driver
    its entry asks to run it on (``mode``; "" = the target's), whether the
    build found torch eager faster there (``prefer_eager``), and torch.compile's
    code (``compiled_for``). Its signature is parsed from its key when first asked
    for (``sig``)."""

    __slots__ = ("key", "impl", "member", "function", "sha256", "size", "frame", "mode", "prefer_eager", "by_rows",
                 "runner", "verified", "_sig", "compiled", "compiled_rows", "compiled_why")

    def __init__(self, key: str, entry: Mapping[str, Any]):
        self.key = key
        self.impl, self.member, self.function = entry["impl"], entry["member"], entry["function"]
        self.sha256, self.size = entry["sha256"], entry["size"]
        frame = entry.get("frame")
        self.frame = None if frame is None else Frame(*frame)
        self.mode = entry.get("mode") or ""
        eager = entry.get("eager")
        self.prefer_eager = eager is not None
        # [(log rows, eager faster)] of a kernel timed at several sizes; None: one decision for all
        self.by_rows = _per_size(eager)
        self.runner: Any = None  # its KernelRunner, once loaded (Bundle._runner)
        self.verified = False
        self._sig: KernelSignature | None = None
        # torch.compile's code against the kernel (the routes' ``compiled``: false, true, [[rows, torch.compile
        # not beaten], ...] or {"untimed": why}): beaten or not (None: no timed verdict, ``compiled_why`` says why)
        compiled = entry.get("compiled")
        self.compiled_rows = _per_size(compiled)
        if compiled is None or isinstance(compiled, Mapping):
            self.compiled: bool | None = None
            self.compiled_why = ("no torch.compile verdict in the bundle (built before one was recorded)"
                                 if compiled is None else str(compiled.get("untimed", "")))
        else:
            self.compiled = any(g for _, g in compiled) if isinstance(compiled, list) else bool(compiled)
            self.compiled_why = ""

    @property
    def sig(self) -> KernelSignature:
        sig = self._sig
        if sig is None:
            sig = self._sig = KernelSignature.parse(self.key)
        return sig

    def eager_for(self, call: KernelSignature) -> bool:
        """Whether torch eager runs ``call`` (a static signature this kernel serves):
        the decision of the timed size nearest in rows (log scale), else the kernel's."""
        return self.prefer_eager if self.by_rows is None else nearest_in_rows(self.by_rows, call.rows)

    def compiled_for(self, call: KernelSignature) -> bool | None:
        """Whether torch.compile's code for ``call`` was not beaten by this kernel (the timed
        size nearest in rows decides, as ``eager_for``); None where the build recorded no
        timed verdict (``compiled_why`` says why)."""
        return self.compiled if self.compiled_rows is None else nearest_in_rows(self.compiled_rows, call.rows)

    def torch_for(self, call: KernelSignature, compiled: bool) -> bool:
        """Whether torch's op runs ``call`` rather than the kernel: where ``compiled`` (the
        ``torch.compile`` backend's bundle), torch.compile's verdict, else (and where it has
        none) torch eager's (``eager_for``)."""
        v = self.compiled_for(call) if compiled else None
        return self.eager_for(call) if v is None else v

    @property
    def always_eager(self) -> bool:
        """Whether torch eager runs every call this kernel serves (where ``prefer_eager``):
        the build found it faster at every size it timed."""
        return self.prefer_eager and (self.by_rows is None or all(won for _, won in self.by_rows))


class KernelTable:
    """One bundle target's kernels (from its routes, ``split_format.check_routes``):
    the runnable ones by key, why the others are not runnable, and the
    second-chance lookups. Only the kernels a call could match are parsed:
    those of its op, dtype and mask (``_group``), the first time such a call
    misses its exact key."""

    def __init__(self, routes: Mapping[str, Any], target: str):
        self.target = target
        self.kernels: dict[str, BundledKernel] = {}
        self.unavailable: dict[str, str] = {}
        for key, e in routes.items():
            if e is None:
                self.unavailable[key] = f"not built for target {target}"
            elif "unavailable" in e:
                self.unavailable[key] = f"unavailable on target {target}: {e['unavailable']}"
            else:
                self.kernels[key] = BundledKernel(key, e)
        # Second-chance lookups for what ATen's arguments cannot pin down (see _relaxed_key),
        # and the dynamic kernels, by what a call must match besides its leading dims (family_key);
        # filled a group at a time (_fill)
        self.relaxed: dict[str, list[str]] = defaultdict(list)
        self.dynamic: dict[str, list[str]] = defaultdict(list)
        self._groups: dict[tuple[str, str, str], list[str]] | None = None
        # per-call memo (memo.py)
        self._resolved: dict[KernelSignature, tuple[BundledKernel, KernelSignature] | None] = {}

    def _fill(self, sig: KernelSignature) -> None:
        """Put the kernels of ``sig``'s group (op, dtype, mask: what both lookups keep) into
        ``relaxed`` and ``dynamic``, once."""
        if self._groups is None:
            groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
            for key in sorted(self.kernels):
                groups[_group(key)].append(key)
            self._groups = groups
        for key in self._groups.pop(_group(sig.key), ()):
            ksig = self.kernels[key].sig
            if ksig.is_dynamic:
                self.dynamic[family_key(ksig)].append(key)
            else:
                self.relaxed[_relaxed_key(ksig)].append(key)

    def resolve(self, sig: KernelSignature) -> tuple[BundledKernel, KernelSignature] | None:
        """(kernel, the static signature it runs as) for a call's static ``sig``:
        the exact key, else a static kernel that differs only where it does not
        matter (``_relaxed_key``), preferring the default stats dtype, else a
        dynamic kernel that takes the call's shape (``resolve_dynamic``)."""
        try:
            return self._resolved[sig]
        except KeyError:
            pass
        found = self._resolve_uncached(sig)
        remember(self._resolved, sig, found)
        return found

    def _resolve_uncached(self, sig: KernelSignature) -> tuple[BundledKernel, KernelSignature] | None:
        k = self.kernels.get(sig.key)
        if k is not None:
            return k, k.sig
        self._fill(sig)
        cands = self.relaxed.get(_relaxed_key(sig), ())

        def rank(c: str):
            ks = self.kernels[c].sig
            return (ks.stats_dtype != "float32", ks.bias != sig.bias, ks.eps != sig.eps, c)

        best = min(cands, key=rank, default=None)
        if best is not None:
            return self.kernels[best], self.kernels[best].sig
        return self.resolve_dynamic(sig)[0]

    def resolve_dynamic(self, sig: KernelSignature) -> tuple[tuple[BundledKernel, KernelSignature] | None, dict[str, str]]:
        """The dynamic kernel for a static ``sig`` (same op, normalized shape, dtype,
        mask, eps and affine form as ``_relaxed_key`` compares them; its static
        dims equal and the call within its bounds: ``KernelSignature.bind``),
        the one with the most static dims first, and why each other one of the
        family does not take the call."""
        best, why_not = None, {}
        self._fill(sig)
        for c in self.dynamic.get(family_key(sig), ()):
            k = self.kernels[c]
            try:
                bound = k.sig.bind(sig.input_shape)  # type: ignore[arg-type]  # sig is static: ints
            except SignatureError as e:
                why_not[c] = str(e)
                continue
            rank = (-k.sig.static_dims, k.sig.stats_dtype != "float32", k.sig.bias != sig.bias,
                    k.sig.eps != sig.eps, len(k.sig.input_shape) != len(sig.input_shape), c)
            if best is None or rank < best[0]:
                best = (rank, k, bound)
        return (None if best is None else (best[1], best[2])), why_not

    def not_found(self, key: str) -> KernelNotFound:
        reason = self.unavailable.get(key, "")
        try:
            sig = KernelSignature.parse(key)
        except SignatureError:
            sig = None
        if not reason:
            relaxed = _relaxed_key(sig) if sig is not None else None
            for other, why in sorted(self.unavailable.items()):
                if relaxed and _relaxed_key(KernelSignature.parse(other)) == relaxed:
                    reason = f"{why} (as {other})"
                    break
        if not reason and sig is not None and not sig.is_dynamic:  # a dynamic kernel that would take it
            for other, why in sorted(self.unavailable.items()):
                o = KernelSignature.parse(other)
                if o.is_dynamic and family_key(o) == family_key(sig):
                    try:
                        o.bind(sig.input_shape)  # type: ignore[arg-type]  # sig is static: ints
                    except SignatureError:
                        continue
                    reason = f"{why} (as {other})"
                    break
        near = nearest_keys(key, self.kernels)
        if sig is not None and not sig.is_dynamic:
            # the dynamic kernels that came close: right width and kind, wrong size
            _, why_not = self.resolve_dynamic(sig)
            if why_not:
                reason = "; ".join([reason] * bool(reason) + [
                    "dynamic kernels of this kind do not take the call: " + "; ".join(why_not.values())])
                near = list(why_not) + [k for k in near if k not in why_not]
        return KernelNotFound(key, self.target, near, reason)


def _group(key: str) -> tuple[str, str, str]:
    """A key's op, dtype code and mask: the fields a kernel and the calls it may
    serve share (``_relaxed_key`` and ``family_key`` keep them)."""
    parts = key.split("-")
    return parts[0], parts[1], parts[-1]


def _relaxed_key(sig: KernelSignature) -> str:
    """The key with what a call cannot pin down, or what does not change the
    kernel, normalized: the stats dtype; for backward kernels eps (the saved
    statistics carry it) and, for an op with a bias, whether it has one (a
    backward kernel never takes the bias; only the bias gradient needs it)."""
    changes: dict[str, Any] = {"stats_dtype": "float32"}
    if not sig.is_forward:
        changes["eps"] = DEFAULT_EPS
        if ops.get(sig.op).has_bias:
            changes["bias"] = sig.affine
    return sig.replace(**changes).key


def family_key(sig: KernelSignature) -> str:
    """``_relaxed_key`` without the dims a dynamic kernel may leave open: what it
    and a call must share (op, dtype, the op's shape parameters, mask, affine form,
    eps; ``Op.family_shape``: the normalized shape, group norm's channels and rank)."""
    shape = ops.get(sig.op).family_shape(sig.input_shape, sig.normalized_shape, sig.groups)
    return _relaxed_key(sig.replace(input_shape=shape, max_elements=None))


__all__ = ["KernelTable"]
