"""Import stubs for the measurement chroot: huggingface_hub and tokenizers.

tools/measure builds every model from a config dict with random weights and
feeds it random token ids, so it never downloads a file nor tokenizes text;
transformers only needs these two packages' names to import its modeling
code. A stubbed package and each of its submodules resolve a name that is
not listed in `values` to a placeholder class, which raises if anything
ever instantiates it, so a code path that really needs the hub or a
tokenizer fails loudly instead of measuring something else.
"""

import importlib.abc
import importlib.machinery
import re
import sys
import types


class _Placeholder(Exception):
    """Stands for any class or function of a stubbed package; calling it is an error."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__}: this package is an import stub in tools/measure")

    def __init_subclass__(cls, **kwargs):
        pass


def _module_getattr(modname, values):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = values[name] if name in values else type(name, (_Placeholder,), {})
        setattr(sys.modules[modname], name, value)
        return value

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root, values):
        self.root, self.values = root, values

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name, self.values)
        return mod

    def exec_module(self, module):
        pass


def install(package, values):
    """Make `package` (already imported) and all its submodules stubs."""
    sys.meta_path.insert(0, _Finder(package, values))
    sys.modules[package].__getattr__ = _module_getattr(package, values)


# huggingface_hub's constants and the few functions transformers calls at
# import time, shared by the huggingface_hub stubs of stubs/ and
# stubs-torch1/.
HUB_VALUES = {
    "HF_HUB_DISABLE_TELEMETRY": True,
    "HF_HUB_OFFLINE": True,
    "HF_HUB_ENABLE_HF_TRANSFER": False,
    "HF_HUB_DISABLE_PROGRESS_BARS": True,
    "HF_HOME": "/nonexistent/hf",
    "HF_HUB_CACHE": "/nonexistent/hf/hub",
    "HUGGINGFACE_HUB_CACHE": "/nonexistent/hf/hub",
    "HF_ASSETS_CACHE": "/nonexistent/hf/assets",
    "ENDPOINT": "https://localhost.invalid",
    "HUGGINGFACE_CO_URL_TEMPLATE": "https://localhost.invalid/{repo_id}/resolve/{revision}/{filename}",
    "REPO_TYPES": ["model", "dataset", "space"],
    "REPO_TYPES_URLS_PREFIXES": {"dataset": "datasets/", "space": "spaces/"},
    "DEFAULT_REVISION": "main",
    "SAFETENSORS_SINGLE_FILE": "model.safetensors",
    "SAFETENSORS_INDEX_FILE": "model.safetensors.index.json",
    "SAFETENSORS_MAX_HEADER_LENGTH": 25_000_000,
    "CONFIG_NAME": "config.json",
    "HF_HUB_ETAG_TIMEOUT": 10,
    "HF_HUB_DOWNLOAD_TIMEOUT": 10,
    "are_progress_bars_disabled": lambda *a, **k: True,
    "disable_progress_bars": lambda *a, **k: None,
    "enable_progress_bars": lambda *a, **k: None,
    "is_offline_mode": lambda *a, **k: True,
    "REGEX_COMMIT_HASH": re.compile(r"^[0-9a-f]{40}$"),
    # diffusers decorates its hub functions at import time.
    "validate_hf_hub_args": lambda fn: fn,
}
