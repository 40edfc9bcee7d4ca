"""Cost models: how long a node of the execution graph takes on some hardware.

:mod:`traincast.costs.hardware` is the hardware catalog (GPUs, links, node presets), every
number named and sourced in ``costs/data/hardware.toml``.
"""
