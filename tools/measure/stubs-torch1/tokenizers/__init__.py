"""Import stub for tokenizers for the torch-1 grid (see ../stubs/_importstub.py).

The same stub as ../stubs/tokenizers, at a version transformers v4.47.1's
dependency check accepts (tokenizers>=0.21,<0.22): stubs-torch1 comes first
on the path of the torch-1 runs. No tokenizer is ever built.
"""

from _importstub import install

__version__ = "0.21.0"

install(__name__, {})
