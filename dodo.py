"""`doit build`: build every manifest in manifests/ into artifacts/.

The graph lives in boo_build.build.creators; the `boo-build` CLI loads the same one
with options (targets, --allow-missing, --no-bench, ...).
"""

import sys
from pathlib import Path

from boo_build.build import creators as _creators
from boo_build.build import tasks as _tasks
from boo_build.cli import graph as _cli
from boo_build.errors import BuildError as _BuildError

_ROOT = Path(__file__).resolve().parent
_config = _tasks.BuildConfig(manifests=_cli.default_manifests(_ROOT / "manifests"),
                             out_dir=_ROOT / _cli.DEFAULT_OUT)
try:
    globals().update(_creators.task_creators(_config))
except _BuildError as e:
    sys.exit(f"boo-build: {e}")
_tasks.interrupt_on_sigterm()
DOIT_CONFIG = _cli.doit_config(_config.out_dir, None, quiet=False)
