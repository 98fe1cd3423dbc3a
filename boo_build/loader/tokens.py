"""Which open bundle a custom op's ``bundle`` argument names (pure Python).

A torch custom op cannot take a ``Bundle`` object: it takes a token,
``bundle_token(b)``, from this registry of the bundles open in this process
(weak: registering keeps no bundle alive; a module holding its bundle keeps
it, and its token, valid), or "" for the default bundle at the time of the
call (``set_default``, else the ``BOO_BUNDLE`` environment variable).

Below the ``Bundle`` class on purpose: ``Bundle.token`` and ``Bundle.by_token``
hand these to the op modules' custom ops (which never import the loader), and
opening ``BOO_BUNDLE``'s path is left to the opener ``loader.custom_ops``
installs (``use_opener``), the module that hands out "" tokens.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Any, Callable

BUNDLE_ENV = "BOO_BUNDLE"

_BY_TOKEN: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_TOKENS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
_SERIAL = itertools.count(1)
_registry_lock = threading.Lock()

_default: Any = None
_default_lock = threading.Lock()
_opener: Callable[[str], Any] | None = None


def use_opener(opener: Callable[[str], Any]) -> None:
    """How ``default_bundle`` opens ``BOO_BUNDLE``'s path (``open_bundle``)."""
    global _opener
    _opener = opener


def bundle_token(bundle: Any, token: str | None = None, *, rebind: bool = False) -> str:
    """The token naming ``bundle`` in this process (registered on first use:
    ``name-version@target#n``). ``token``: bind that token instead (a graph
    recorded in another process), unless it names another open bundle
    (``rebind``: it names ``bundle`` from now on, for a token that names the
    bundle's content, so that either serves its graphs)."""
    have = _TOKENS.get(bundle)
    if have is not None and token in (None, have) and (not rebind or _BY_TOKEN.get(have) is bundle):
        return have
    with _registry_lock:
        if token is not None:
            if not token:
                raise ValueError('the token "" stands for the default bundle: use set_default_bundle')
            other = _BY_TOKEN.get(token)
            if other is not None and other is not bundle and not rebind:
                raise ValueError(f"bundle token {token!r} already names {other!r}")
        else:
            token = _TOKENS.get(bundle) or f"{bundle.name}-{bundle.version}@{bundle.target.name}#{next(_SERIAL)}"
        _TOKENS[bundle] = token  # the latest binding is the one this bundle reports
        _BY_TOKEN[token] = bundle
        return token


def bundle_for(token: str) -> Any:
    """The bundle a token names; "" is the default bundle."""
    if not token:
        return default_bundle()
    b = _BY_TOKEN.get(token)
    if b is None:
        raise LookupError(f"no open bundle has token {token!r} in this process (a graph recorded with a bundle "
                          "that was closed, or in another process): open it and bind the token with "
                          f"boo_build.loader.custom_ops.bundle_token(open_bundle(path), {token!r})")
    return b


def set_default(bundle: Any) -> Any:
    global _default
    with _default_lock:
        _default = bundle
        return _default


def peek_default() -> Any:
    """The default bundle if one is set or was opened, else None: a read that takes
    no lock and opens nothing (a module's per-call check)."""
    return _default


def default_bundle() -> Any:
    global _default
    with _default_lock:
        if _default is None:
            path = os.environ.get(BUNDLE_ENV)
            if not path:
                raise RuntimeError(
                    "no bundle: pass bundle= to the module, call boo_build.loader.set_default_bundle(...), "
                    f"or set {BUNDLE_ENV} to a bundle path or a lock file (docs/store.md)")
            if _opener is None:
                raise RuntimeError(f"{BUNDLE_ENV} is set, but nothing can open it: import boo_build.loader.custom_ops")
            _default = _opener(path)
        return _default
