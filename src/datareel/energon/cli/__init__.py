"""Energon's ``megatron.energon.cli``: the ``energon`` command group (:mod:`.main`)."""
