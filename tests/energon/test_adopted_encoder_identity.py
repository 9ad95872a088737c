"""What docs/migrating-from-energon.md says of a megatron.energon task encoder the facade adopts
(``foreign.adopt_encoder``): ``type(e)`` is no longer the user's class (same name, qualname and module),
``isinstance`` still holds, and it pickles as the user's class (adopted again when unpickled)."""

from __future__ import annotations

import pickle

import megatron.energon as me

from datareel.energon.foreign import adopt_encoder


class MyEncoder(me.DefaultTaskEncoder):
    pass


def test_an_adopted_encoder_is_an_instance_of_its_class_not_that_class():
    encoder = MyEncoder()
    adopt_encoder(encoder)
    adopted = type(encoder)
    assert adopted is not MyEncoder and isinstance(encoder, MyEncoder) and issubclass(adopted, MyEncoder)
    assert (adopted.__name__, adopted.__qualname__, adopted.__module__) == (
        "MyEncoder",
        "MyEncoder",
        MyEncoder.__module__,
    )
    data = pickle.dumps(encoder)
    assert b"_readopted" in data  # pickled as MyEncoder, adopted again on load
    again = pickle.loads(data)
    assert type(again) is adopted and isinstance(again, MyEncoder)
