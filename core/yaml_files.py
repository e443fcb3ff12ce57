"""YAML as people write it: ``load`` is ``yaml.safe_load`` that also reads ``1e8`` and
``3.0e8`` as numbers.

PyYAML follows YAML 1.1, whose float pattern needs a dot and a signed exponent (``3.0e+8``),
so ``total: 1e8`` would reach a strict spec as the string ``"1e8"`` and be refused. YAML 1.2
(and JSON) read it as a float; the job spec's work counts are naturally written that way.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's float syntax for exponents."""


_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+\Z")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def load(text: str | bytes) -> Any:
    """The document in ``text`` (safe types only). Raises ``yaml.YAMLError`` on bad YAML."""
    return yaml.load(text, Loader=_Loader)
