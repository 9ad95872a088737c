"""A joiner a YAML names is an object defined in the module it names (or a submodule of that package),
reached through public names only: ``{__module__: M, __function__: os.system}`` (an attribute path into
a module ``M`` imported) or a ``_private`` part is refused, naming it."""

from __future__ import annotations

import os
import sys
import types

import pytest

from datareel.blend.join import resolve_joiner
from datareel.errors import DatasetError


def f_joiner(*samples):
    return samples[0]


class FHolder:
    @staticmethod
    def join(*samples):
        return samples[0]


@pytest.fixture()
def module():
    mod = types.ModuleType("f_joiner_mod")
    mod.os = os  # an imported module, as `import os` leaves it
    mod.imported = f_joiner  # defined elsewhere: `from x import f_joiner`
    mod._hidden = f_joiner

    def own(*samples):
        return samples[0]

    own.__module__ = "f_joiner_mod"
    mod.own = own
    holder = type("Holder", (), {"join": staticmethod(own), "_secret": staticmethod(own)})
    holder.__module__ = "f_joiner_mod"
    mod.Holder = holder
    sys.modules["f_joiner_mod"] = mod
    yield mod
    del sys.modules["f_joiner_mod"]


def spec(name, kind="__function__", module="f_joiner_mod"):
    return {"__module__": module, kind: name}


def test_f_a_joiner_defined_in_its_module_resolves(module):
    assert resolve_joiner(spec("own"), "here")[0] is module.own
    assert resolve_joiner(spec("Holder.join"), "here")[0] is module.own
    assert resolve_joiner(spec("f_joiner", module=__name__), "here")[0] is f_joiner
    assert resolve_joiner(spec("FHolder", "__class__", module=__name__), "here")[0] is FHolder


@pytest.mark.parametrize("name", ["os.system", "os.path.join", "imported"])
def test_f_an_object_defined_elsewhere_is_refused(module, name):
    with pytest.raises(DatasetError, match=rf"{name!r}.* is defined in") as err:
        resolve_joiner(spec(name), "here")
    assert "f_joiner_mod" in str(err.value)


@pytest.mark.parametrize("name", ["_hidden", "Holder._secret", "Holder.__init__", "own.__globals__"])
def test_f_private_parts_are_refused(module, name):
    with pytest.raises(DatasetError, match=rf"{name!r}.*'_'"):
        resolve_joiner(spec(name), "here")


def test_f_joiners_given_in_code_are_taken_as_given(module):
    assert resolve_joiner(spec("imported"), "here", {"f_joiner_mod.imported": os.path.join})[0] is os.path.join
