"""Import stub for huggingface_hub (see _importstub.py): constants and names only."""

from _importstub import HUB_VALUES, install

__version__ = "0.36.0"

install(__name__, HUB_VALUES)
