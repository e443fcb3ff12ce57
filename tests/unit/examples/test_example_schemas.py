"""The examples' comments name the model that reads them: that module must define it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCHEMA_RE = re.compile(r"Schema: (\S+\.py) \((\w+)\)")
NAMED = [(f.name, *m.groups()) for f in sorted((REPO / "examples").glob("*.yaml"))
         for m in SCHEMA_RE.finditer(f.read_text())]


def test_some_example_names_its_schema():
    assert NAMED


@pytest.mark.parametrize("example, module, model", NAMED)
def test_the_named_schema_module_defines_the_model(example, module, model):
    path = REPO / module
    assert path.is_file(), f"{example}: {module} does not exist"
    assert re.search(rf"^class {model}\b", path.read_text(), re.MULTILINE), (
        f"{example}: {module} defines no {model}")
