"""The bundle's kernels as torch custom ops (namespace ``boo``), with their
autograd.

Imports torch. Every op's custom ops and their autograd are registered in
one place from each op's description (``library``, ``entries``);
importing this module registers them, installs the opener of the
default bundle, and names the bundles (``bundle_token``). The Bundle's
entry points (``native_layer_norm``, ``fused_rms_norm`` and their
``*_backward``) go through the ops when grad mode is on and a torch argument
requires grad, and ``boo_build.loader.nn``'s modules call the ops directly,
so ``torch.compile(model, fullgraph=True)`` (Inductor included) and
``torch.export`` see one opaque op per norm instead of IREE calls they
cannot trace.

    torch.ops.boo.layer_norm(input, normalized_shape, weight, bias, eps, bundle) -> (out, mean, rstd)
    torch.ops.boo.layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                      output_mask, eps, bundle) -> [the gradients asked for]
    torch.ops.boo.rms_norm(input, normalized_shape, weight, eps, weight_offset, bundle) -> (out, rstd)
    torch.ops.boo.rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask,
                                    weight_offset, eps, bundle) -> [the gradients asked for]
    torch.ops.boo.group_norm(input, weight, bias, N, C, HxW, group, eps, bundle) -> (out, mean, rstd)
    torch.ops.boo.group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask,
                                      eps, bundle) -> [the gradients asked for]

ATen's arguments and results (``native_layer_norm``, ``_fused_rms_norm``,
``native_group_norm`` and their backwards), but for three points: a backward returns the list of the
gradients ``output_mask`` asks for (a weight or bias gradient only where
that tensor is given), in ATen's order, not a tuple holding undefined
tensors (custom ops cannot return those); ``bundle`` names the bundle; and RMS
norm's take ``weight_offset`` (0: ATen's math; Gemma's norms: 1, scaling by
``1 + weight``; ``loader/entries/rms_norm.py``).

Which bundle (an op cannot take a ``Bundle`` object): ``bundle`` is a token,
``bundle_token(b)``, from a registry of the bundles open in this process
(weak: registering keeps no bundle alive; a module holding its bundle keeps
it, and its token, valid), or "" for the default bundle at the time of the
call (``set_default_bundle``, else the ``BOO_BUNDLE`` environment variable).
A graph captured by ``torch.compile`` or ``torch.export`` holds the token as
a constant: it runs in this process while that bundle is open; export a
model built on the default bundle ("") to run it wherever a default is set,
or bind the recorded token to a bundle there with ``bundle_token(b, token)``.

Fake (meta) implementations compute the results from the inputs' shapes
and dtypes only (mean/rstd in the op's ``default_stats_dtype``), so
symbolic sizes trace: with dynamic kernels in the bundle,
``torch.compile(..., dynamic=True)`` serves every batch size from one graph.

Autograd (``register_autograd``, forward / setup_context / backward):

* First derivatives run ONE bundle backward kernel (or its eager fallback)
  for exactly the gradients autograd needs (``ctx.needs_input_grad``): only
  the input gradient when the weights are frozen, only the weight (and bias)
  gradients when the input needs none. Under ``torch.no_grad()`` or
  ``torch.inference_mode()`` nothing is saved: only forward kernels run.
* Layer norm's mean and rstd are not differentiable (as ATen's). RMS norm's
  rstd is: its gradient reaches the input as ``-grad_rstd * rstd**3 * x / N``
  (torch ops; the kernels take grad_out only).
* Second derivatives (through a backward op) have no kernels: they
  differentiate torch's eager backward (the loader's eager fallback), as
  torch does, and fail where torch's do (layer norm's mean and rstd).

Autocast: on the CPU torch's layer_norm and rms_norm have no autocast
kernel (they run in the input's dtype, with float32 parameters if so given:
``nn`` casts the parameters to the input's dtype, whose kernel runs); on
CUDA (and ROCm) autocast runs them in float32, and so it runs the forward
ops (``register_autocast``).
"""

from __future__ import annotations

import os

import torch

from .. import ops
from ..torch_classes import autocast_devices
from . import tokens
from .bundle import Bundle, open_bundle
from .library import registered

BUNDLE_ENV = tokens.BUNDLE_ENV
bundle_for = tokens.bundle_for


def bundle_token(bundle: Bundle, token: str | None = None) -> str:
    """The token the ops name ``bundle`` by in this process (registered on
    first use: ``name-version@target#n``). ``token``: bind that token instead
    (a graph recorded in another process), unless it names another open bundle."""
    if not isinstance(bundle, Bundle):
        raise TypeError(f"bundle must be a Bundle (open_bundle(...)), got {type(bundle).__name__}")
    return tokens.bundle_token(bundle, token)


def set_default_bundle(bundle: Bundle | str | os.PathLike | None) -> Bundle | None:
    """Bundle used by modules built without ``bundle=`` (and the ops' ""); a path is opened (best device)."""
    return tokens.set_default(bundle if bundle is None or isinstance(bundle, Bundle) else open_bundle(bundle))


def default_bundle() -> Bundle:
    return tokens.default_bundle()


tokens.use_opener(open_bundle)
registered(Bundle.by_token)

# Where torch runs its norms in float32 under autocast (CUDA, which ROCm
# shares), and so the ops do: the nn modules leave parameter casts to it there.
AUTOCAST_FLOAT32 = autocast_devices(tuple(a for n in ops.names() if (a := ops.get(n).autocast_aten)))


def __getattr__(name: str):
    # The custom ops by their short name (layer_norm, rms_norm_backward, ...), as before they moved.
    if not name.startswith("_") and hasattr(torch.ops.boo, name):
        return getattr(torch.ops.boo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["bundle_token", "bundle_for", "set_default_bundle", "default_bundle", "BUNDLE_ENV", "AUTOCAST_FLOAT32"]
