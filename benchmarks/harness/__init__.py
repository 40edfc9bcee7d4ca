"""Experiment harnesses of the benchmarks: code that produces ground truth or fits shipped data,
used only by ``benchmarks/*.py`` and the tests, never by the ``traincast`` package.

- :mod:`harness.random_models` -- random DLRM / Transformer configurations recorded as real CPU
  training runs (unprofiled step times, one execution trace, one Kineto trace).
- :mod:`harness.ddp` -- those configurations trained with DDP on local gloo ranks (the ground
  truth of ``predict --from-et --world-size``).
- :mod:`harness.sharded_dlrm` -- a table-wise sharded DLRM trained on local gloo ranks (the
  ground truth of the sharding planner).
- :mod:`harness.vtrain` -- vTrain's measured A100 iterations as plan cases.
- :mod:`harness.calibrate` -- the fit of the planner's efficiencies to measured iterations
  (writes ``traincast/plan/data/calibration.json``; the planner only reads that file,
  :class:`traincast.plan.costs.PlanCalibration`).

Import path: the folder ``benchmarks/`` is on ``sys.path`` (a benchmark script run as
``python benchmarks/<script>.py`` has it as ``sys.path[0]``; ``tests/conftest.py`` inserts it for
the tests), so these import as ``harness.<module>``. Ranks spawned by
:func:`traincast.record.local_group.spawn_group` inherit the parent's ``sys.path``, so their
worker functions resolve by the same module name.
"""
