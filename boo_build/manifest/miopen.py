"""MIOpen / iree-turbine BOO driver command lines -> kernel signatures.

Pure Python. The command names come from the ops (``Op.commands``:
``layernorm``, ``layernormfp16``, ``layernormbfp16``, this project's
``rmsnorm``, ``rmsnormfp16``, ``rmsnormbfp16``, and ``groupnorm``,
``groupnormfp16``, ``groupnormbfp16``), the flags are MIOpen's. How a command
gives its input shape is the op's (``Op.command_shape``): ``"tensor"``
(layernorm's) or ``"ncdhw"`` (groupnorm's, below).

* ``-X/--input NxCxHxW`` (tensor: required)
* ``-F/--forw`` mask bit set: 1 forward, 2 input, 4 weight, 8 bias grad (default 1)
* ``-m/--mode``: 0 = MIOPEN_ELEMENTWISE_AFFINE, no weight and no bias tensors;
  1 = MIOPEN_WEIGHT_BIAS, weight and bias (the op's ``default_bias``: a weight
  only for rmsnorm) (default 0)
* ``-e/--eps`` (default 1e-5)
* ``-o/--normalized_dim``: normalized_shape = input_shape[o:] (default: last dim)
* ignored, each taking a value: ``-t/--time``, ``-i/--iter``, ``-V/--verify``,
  ``-w/--wall``.

``ncdhw`` (MIOpen's ``driver/groupnorm_driver.hpp``): ``-n/--batchsize``
(default 100), ``-c/--in_channels`` (6), ``-D/--in_d`` (0), ``-H/--in_h`` (32),
``-W/--in_w`` (32), ``-g/--num_groups`` (3); the input is ``[n, c, D, H, W]``
when D, H and W are all non-zero, else ``[n, c, H, W]`` when H and W are, else
``[n, c, W]`` (MIOpen's order of tests); ``-e``, ``-m``, ``-F`` and the ignored
flags as above (MIOpen's groupnorm driver runs only the forward: ``-F`` is
this project's bit set, as for layernorm).

Both ``--flag value`` and ``--flag=value`` work.  (iree-turbine 3.9.0's
driver inverts ``-m`` and always adds a bias; this follows MIOpen.)
"""

from __future__ import annotations

import os
import shlex

from .. import ops
from ..errors import SignatureError
from ..ops.base import BIAS_GRAD, DEFAULT_EPS, WEIGHT_GRAD
from ..shapes import DEFAULT_MAX_ELEMENTS, dims_from_text, limit_problem
from ..signature import KernelSignature

# flag spelling -> canonical name; every flag takes one value
FLAGS = {
    "-X": "input", "--input": "input",
    "-F": "forw", "--forw": "forw",
    "-m": "mode", "--mode": "mode",
    "-e": "eps", "--eps": "eps",
    "-o": "normalized_dim", "--normalized_dim": "normalized_dim",
    # timing / verification: accepted and ignored
    "-t": "time", "--time": "time",
    "-i": "iter", "--iter": "iter",
    "-V": "verify", "--verify": "verify",
    "-w": "wall", "--wall": "wall",
}
_IGNORED = {"time", "iter", "verify", "wall"}

# groupnorm's flags (``ncdhw``): the input's dims and groups instead of -X and -o
NCDHW_FLAGS = {
    "-n": "batchsize", "--batchsize": "batchsize",
    "-c": "in_channels", "--in_channels": "in_channels",
    "-D": "in_d", "--in_d": "in_d",
    "-H": "in_h", "--in_h": "in_h",
    "-W": "in_w", "--in_w": "in_w",
    "-g": "num_groups", "--num_groups": "num_groups",
    **{k: v for k, v in FLAGS.items() if v not in ("input", "normalized_dim")},
}
NCDHW_DEFAULTS = {"batchsize": 100, "in_channels": 6, "in_d": 0, "in_h": 32, "in_w": 32, "num_groups": 3}


def _flag_list(table: dict[str, str]) -> str:
    """``-X/--input, -F/--forw, ...``: each name's spellings, in the table's order."""
    spellings: dict[str, list[str]] = {}
    for flag, name in table.items():
        spellings.setdefault(name, []).append(flag)
    return ", ".join("/".join(flags) for flags in spellings.values())


_FLAG_LIST = _flag_list(FLAGS)
_NCDHW_FLAG_LIST = _flag_list(NCDHW_FLAGS)


def commands() -> dict[str, tuple[str, str]]:
    """command -> (op, dtype), from every registered op."""
    return {cmd: (op, dtype) for op in ops.names() for cmd, dtype in ops.get(op).commands}


def _parse_int(text: str, what: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise SignatureError(f"{what} must be an integer, got {text!r}") from None


def _ncdhw_shape(values: dict[str, tuple[str, str]]) -> tuple[tuple[int, ...], int]:
    """(input shape, groups) of a groupnorm command, as MIOpen's driver reads them."""
    v = {name: _parse_int(values[name][1], f"{values[name][0]}") if name in values else default
         for name, default in NCDHW_DEFAULTS.items()}
    n, c, d, h, w = (v[k] for k in ("batchsize", "in_channels", "in_d", "in_h", "in_w"))
    if n and c and d and h and w:
        shape: tuple[int, ...] = (n, c, d, h, w)
    elif n and c and h and w:
        shape = (n, c, h, w)
    elif n and c and w:
        shape = (n, c, w)
    else:
        raise SignatureError(f"bad input lengths n={n} c={c} D={d} H={h} W={w}: n, c and W must be non-zero "
                             "(MIOpen: [n, c, D, H, W] if D and H are non-zero, [n, c, H, W] if H is, else [n, c, W])")
    if any(x < 0 for x in shape):
        raise SignatureError(f"input lengths must be positive, got {list(shape)}")
    return shape, v["num_groups"]


def _flag_values(cmd: str, args: list[str], flags: dict[str, str] = FLAGS,
                 flag_list: str = _FLAG_LIST) -> dict[str, tuple[str, str]]:
    """canonical flag name -> (spelling, value)."""
    values: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        flag, eq, value = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        if flag not in flags:
            if tok.startswith("-"):
                raise SignatureError(f"unknown flag {flag!r} for {cmd}: use {flag_list}")
            raise SignatureError(f"unexpected argument {tok!r}: every value follows a flag")
        if not eq:
            if i + 1 >= len(args):
                raise SignatureError(f"flag {flag} needs a value")
            value = args[i + 1]
            i += 1
        i += 1
        name = flags[flag]
        if name in _IGNORED:
            continue
        if name in values:
            raise SignatureError(f"flag {flag} given twice (as {values[name][0]} before)")
        values[name] = (flag, value)
    return values


def parse_command(text: str, max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> KernelSignature | None:
    """One driver command -> its signature, or None for a blank / comment-only
    line.  Raises ``SignatureError`` (any problem, message without location).
    The input shape is bounded as a manifest's (``max_elements`` None: no
    element bound)."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as e:
        raise SignatureError(f"cannot split command: {e}") from None
    if not tokens:
        return None
    if os.path.basename(tokens[0]) == "MIOpenDriver":  # pasted driver invocations
        tokens = tokens[1:]
        if not tokens:
            raise SignatureError("MIOpenDriver without a command")
    cmd, args = tokens[0], tokens[1:]
    known = commands()
    if cmd not in known:
        raise SignatureError(f"unknown command {cmd!r}: use one of {', '.join(known)}")
    op, dtype = known[cmd]
    spec = ops.get(op)
    ncdhw = spec.command_shape == "ncdhw"
    values = _flag_values(cmd, args, *((NCDHW_FLAGS, _NCDHW_FLAG_LIST) if ncdhw else (FLAGS, _FLAG_LIST)))
    if ncdhw:
        shape, groups = _ncdhw_shape(values)
        problem = limit_problem("input", shape, max_elements)
        if problem:
            raise SignatureError(problem)
        return _signature(cmd, spec, values, shape, (), groups)

    if "input" not in values:
        raise SignatureError(f"{cmd} needs -X/--input, e.g. -X 10x32x42x32")
    text_shape = values["input"][1]
    shape = dims_from_text("-X/--input", text_shape, example="10x32x42x32")
    problem = limit_problem("-X/--input", shape, max_elements)
    if problem:
        raise SignatureError(problem)

    ndim = len(shape)
    norm_dim = _parse_int(values["normalized_dim"][1], "-o/--normalized_dim") \
        if "normalized_dim" in values else ndim - 1
    if not 0 <= norm_dim < ndim:
        raise SignatureError(
            f"-o/--normalized_dim {norm_dim} is out of range for the {ndim}-d input "
            f"{text_shape}: use 0..{ndim - 1}"
        )
    return _signature(cmd, spec, values, shape, shape[norm_dim:], None)


def _signature(cmd: str, spec, values: dict[str, tuple[str, str]], shape: tuple[int, ...],
               normalized_shape: tuple[int, ...], groups: int | None) -> KernelSignature:
    """The signature of a command's flags -F, -m, -e and its shape parameters."""
    mask = _parse_int(values["forw"][1], "-F/--forw") if "forw" in values else 1
    mode = _parse_int(values["mode"][1], "-m/--mode") if "mode" in values else 0
    if mode not in (0, 1):
        raise SignatureError(
            f"-m/--mode {mode} is invalid: 0 (MIOPEN_ELEMENTWISE_AFFINE, no weight or bias) "
            "or 1 (MIOPEN_WEIGHT_BIAS)"
        )
    affine = mode == 1
    bias = spec.default_bias(affine)
    eps = DEFAULT_EPS
    if "eps" in values:
        try:
            eps = float(values["eps"][1])
        except ValueError:
            raise SignatureError(f"-e/--eps must be a number, got {values['eps'][1]!r}") from None
    try:
        return KernelSignature(
            op=spec.name, input_shape=shape, normalized_shape=normalized_shape, groups=groups,
            dtype=commands()[cmd][1], mask=mask, eps=eps, affine=affine, bias=bias,
        )
    except SignatureError as e:
        hint = ""
        if not affine and mask & (WEIGHT_GRAD | BIAS_GRAD):
            hint = " (-m 0 has no weight or bias; use -m 1 for their gradients)"
        elif not spec.has_bias and mask & BIAS_GRAD:
            hint = f" ({cmd} -m 1 has a weight but no bias)"
        raise SignatureError(f"{e}{hint}") from None
