"""The Loader's options are declared once (:class:`datareel.options.LoaderOptions`): the signature, the defaults,
the docs and the refusals all follow from that one value."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import datareel
from datareel.options import LoaderOptions


def test_the_signature_is_the_options():
    params = list(inspect.signature(datareel.Loader).parameters.values())
    assert [p.name for p in params[:1]] == ["dataset"]
    fields = dataclasses.fields(LoaderOptions)
    assert [(p.name, p.default, p.kind) for p in params[1:]] == [
        (
            f.name,
            inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            inspect.Parameter.KEYWORD_ONLY,
        )
        for f in fields
    ]


def test_every_option_is_documented_on_the_loader():
    doc = datareel.Loader.__doc__ or ""
    missing = [f.name for f in dataclasses.fields(LoaderOptions) if f"``{f.name}``" not in doc]
    assert missing == [], f"Loader's docstring does not describe {missing}"


def test_unknown_and_missing_options_are_refused_by_name():
    with pytest.raises(TypeError, match=r"unknown options \['micro_batch'\].*micro_batch_size"):
        datareel.Loader(list(range(4)), global_batch_size=2, micro_batch=2)
    with pytest.raises(TypeError, match=r"needs \['global_batch_size'\]"):
        datareel.Loader(list(range(4)), micro_batch_size=2)


def test_no_second_list_of_the_options_in_src():
    """Nothing passes the options on through ``locals()`` or lists them a second time as parameters."""
    src = Path(datareel.__file__).parent
    names = [f.name for f in dataclasses.fields(LoaderOptions)]
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        assert "locals()" not in text, f"{path.relative_to(src)} passes arguments through locals()"
        for match in re.finditer(r"def (\w+)\(([^)]*)\)", text, flags=re.S):
            params = set(re.findall(r"\b(\w+)\s*:", match.group(2)))
            assert len(params & set(names)) < 12, f"{path.relative_to(src)}:{match.group(1)} lists the options again"
