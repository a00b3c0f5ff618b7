"""Import stub for huggingface_hub for the torch-1 grid (see ../stubs/_importstub.py).

The constants of ../stubs/huggingface_hub (HUB_VALUES), and what
transformers v4.47.1 also uses at import time: the _deprecate_method
decorator (an identity here) and constants.default_cache_path. Its version
is one that release's dependency check accepts (huggingface-hub>=0.24.0,
<1.0). Nothing is ever downloaded.
"""

from _importstub import HUB_VALUES, install

__version__ = "0.26.5"

install(__name__, dict(HUB_VALUES, _deprecate_method=lambda *a, **k: (lambda f: f),
                       default_cache_path="/nonexistent/hf/hub"))

# v4.47.1 imports the submodule by name from the package ("from huggingface_hub
# import constants"), which must then be the stub module, not a placeholder.
import huggingface_hub.constants  # noqa: E402
