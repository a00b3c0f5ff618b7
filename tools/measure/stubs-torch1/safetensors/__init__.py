"""Import stub for safetensors (see ../stubs/_importstub.py): placeholder names only.

Debian bookworm, the torch-1 chroot, packages no safetensors; transformers
v4.47.1 imports its names at import time and checks its version
(safetensors>=0.4.1, dependency_versions_table.py), so the stub carries
that metadata. A model built from a config with random weights never
reads or writes a safetensors file; a code path that did would fail on a
placeholder.
"""

from _importstub import install

__version__ = "0.4.5"

install(__name__, {})
