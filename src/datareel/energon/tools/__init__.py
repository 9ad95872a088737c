"""Energon's command line tools (``energon prepare``, ``info``, ``lint``, ``preview``, ...) as ``click``
commands, each module's ``command``; on datareel's writer and readers.  A tool datareel has no
counterpart for (the worker debug log analysis, checkpoint redistribution, FUSE mounting) fails naming
why, instead of pretending."""
