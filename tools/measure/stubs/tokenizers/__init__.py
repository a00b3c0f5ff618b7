"""Import stub for tokenizers (see _importstub.py): placeholder names only.

transformers annotates with tokenizers names at import time whether or not
the package is there, so it carries metadata; no tokenizer is ever built.
"""

from _importstub import install

__version__ = "0.22.1"

install(__name__, {})
