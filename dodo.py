"""`doit build`: build every manifest in manifests/ into artifacts/.

The graph lives in boo_build.tasks; the `boo-build` CLI loads the same one
with options (targets, --allow-missing, --no-bench, ...).
"""

import sys
from pathlib import Path

from boo_build.cli import DEFAULT_OUT, default_manifests, doit_config
from boo_build.tasks import BuildConfig, BuildError, interrupt_on_sigterm, task_creators

_ROOT = Path(__file__).resolve().parent
_config = BuildConfig(manifests=default_manifests(_ROOT / "manifests"), out_dir=_ROOT / DEFAULT_OUT)
try:
    globals().update(task_creators(_config))
except BuildError as e:
    sys.exit(f"boo-build: {e}")
interrupt_on_sigterm()
DOIT_CONFIG = doit_config(_config.out_dir, None, quiet=False)
