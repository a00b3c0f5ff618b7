"""Import stub for huggingface_hub (see _importstub.py): constants and names only."""

import re

from _importstub import install

__version__ = "0.36.0"

install(
    __name__,
    {
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
    },
)
