"""Helpers for testing code that uses datareel (shipped, so users can check their own pipelines).

- :func:`check_restore_everywhere` — save after every micro-step on one topology, restore each
  state on another, and compare the rest of the run with an uninterrupted one, global batch by
  global batch (the checker every datareel test of order, mixing, packing and state goes through);
- :func:`make_ranks`, :func:`take_global_batches`, :func:`take_micro_step` — several ranks'
  loaders driven in lockstep in one process;
- :func:`run_local` — a function on local processes joined by gloo on 127.0.0.1;
- :func:`read_profile` — what an order costs in reads (requests and bytes per sample, from the plan alone).

Example::

    from datareel.testing import Topology, check_restore_everywhere
    check_restore_everywhere(my_dataset, global_batch_size=8, before=Topology(4, 2, 1),
                             after=Topology(2, 0, 2), task_encoder=MyEncoder())
"""

from .elastic import Topology, check_restore_everywhere
from .launch import free_port, run_local
from .locality import ReadProfile, read_profile
from .simulate import make_ranks, take_global_batches, take_micro_step, to_python, unbatch

__all__ = [
    "ReadProfile",
    "Topology",
    "check_restore_everywhere",
    "free_port",
    "make_ranks",
    "read_profile",
    "run_local",
    "take_global_batches",
    "take_micro_step",
    "to_python",
    "unbatch",
]
