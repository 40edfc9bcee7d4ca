"""Fit the planner's efficiencies (:class:`~traincast.plan.costs.PlanCalibration`) to measured
iteration times.

Parameters (vector ``u``, all >= their bound): for the ``gemm``, ``attention`` and default
(elementwise, embedding, optimizer) families the inverse efficiency ``1/eff`` (>= 1) and the
per-kernel latency (µs, >= 0); for communication the inverse fraction of line rate (>= 1)
and the collective latency floor (µs, >= 0); a fixed overhead per forward/backward pass of a
micro-batch through a stage and per step (µs, >= 0); the host time to issue one kernel (µs,
>= 0; passes are host-bound when it exceeds the kernels' device time).

Every op duration of a planned graph is linear in ``u`` (``latency * kernels + ideal / eff``;
``alpha + S f / (B eff)``), and the simulated step is a maximum over dependency paths of sums
of durations, so a case's predicted time ``T(u)`` is convex, piecewise linear and positively
homogeneous in ``u``: on the region where the critical path does not change, ``T(u) = c . u``
with ``c = grad T``. The fit therefore alternates (a Gauss-Newton scheme on the exact
simulator):

1. simulate every training case at the current ``u`` and at ``u + h e_k`` for each parameter
   (finite differences give ``c`` of each case: the active path's composition);
2. solve ``min_u sum_i (log(c_i . u) - log(measured_i))^2`` under the bounds
   (:func:`scipy.optimize.least_squares`, relative errors as in the rest of traincast);
3. repeat until ``u`` stops moving (at most ``iterations`` times).

The objective only ever sees the cases it is given; held-out error is measured by simulating
other cases with the result (``benchmarks/plan_vtrain.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from traincast.plan.costs import FamilyEfficiency, PlanCalibration, PlanCosts
from traincast.plan.spec import PlanError
from traincast.plan.step import build_transformer_graph

PARAMS = ("gemm.inv_eff", "gemm.latency_us", "attention.inv_eff", "attention.latency_us",
          "default.inv_eff", "default.latency_us", "comm.inv_eff", "comm.latency_us",
          "pass.overhead_us", "step.overhead_us", "host.launch_us")
_LOWER = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
_UPPER = np.array([50.0, 1e4, 50.0, 1e4, 50.0, 1e4, 50.0, 1e4, 1e6, 1e7, 1e4])
#: starting point: catalog peaks (efficiency 1), no latencies beyond a 1 µs kernel floor
U0 = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0, 100.0, 10.0])


def calibration_from_vector(u: Sequence[float], source: str = "",
                            fit: dict[str, Any] | None = None) -> PlanCalibration:
    """The :class:`PlanCalibration` of a parameter vector (order :data:`PARAMS`)."""
    u = np.asarray(u, float)
    if u.shape != (len(PARAMS),) or not np.all(np.isfinite(u)):
        raise PlanError(f"a calibration vector has {len(PARAMS)} finite values")
    fam = {n: FamilyEfficiency(1.0 / u[2 * i], u[2 * i + 1] * 1e3)
           for i, n in enumerate(("gemm", "attention"))}
    return PlanCalibration(families=fam, default=FamilyEfficiency(1.0 / u[4], u[5] * 1e3),
                           comm_efficiency=1.0 / u[6], comm_latency_us=float(u[7]),
                           pass_overhead_us=float(u[8]), step_overhead_us=float(u[9]),
                           launch_overhead_us=float(u[10]),
                           source=source or "calibration vector", fit=fit or {})


def vector_from_calibration(cal: PlanCalibration) -> np.ndarray:
    g, a, d = cal.family("gemm"), cal.family("attention"), cal.default
    return np.array([1 / g.eff, g.latency_ns / 1e3, 1 / a.eff, a.latency_ns / 1e3,
                     1 / d.eff, d.latency_ns / 1e3, 1 / cal.comm_efficiency,
                     cal.comm_latency_us, cal.pass_overhead_us, cal.step_overhead_us,
                     cal.launch_overhead_us])


def simulate_case(args: tuple[Any, ...]) -> float:
    """Predicted step time (s) of one ``(model, system, layout, u[, comm])`` (picklable for
    pools; ``comm`` an optional measured :class:`~traincast.costs.comm.CommModel`)."""
    model, system, layout, u = args[:4]
    comm = args[4] if len(args) > 4 else None
    pc = PlanCosts.build(system, model.dtype, calibration_from_vector(u), comm)
    return build_transformer_graph(model, layout, pc).run().makespan_ns * 1e-9


def predict_cases(cases: Sequence[Any], u: np.ndarray,
                  mapper: Callable[[Callable, list], list] | None = None,
                  comm: Any = None) -> np.ndarray:
    """Predicted step times (s) of ``cases`` (objects with ``model/system/layout``)."""
    items = [(c.model, c.system, c.layout, np.asarray(u, float), comm) for c in cases]
    run = mapper or (lambda f, xs: [f(x) for x in xs])
    return np.asarray(run(simulate_case, items), float)


def fit_calibration(cases: Sequence[Any], *, iterations: int = 6, u0: np.ndarray | None = None,
                    mapper: Callable[[Callable, list], list] | None = None,
                    comm: Any = None, weights: Sequence[float] | None = None,
                    source: str = "", progress: Callable[[str], None] | None = None
                    ) -> PlanCalibration:
    """Fit :data:`PARAMS` to ``cases`` (each with ``measured_s``); see the module docstring.

    Args:
        cases: training cases (``model``, ``system``, ``layout``, ``measured_s``).
        iterations: linearise-and-solve rounds.
        u0: starting vector (default :data:`U0`).
        mapper: ``mapper(fn, items) -> list`` to run simulations (e.g. a process pool).
        comm: a measured collective model used for every case (e.g. fitted on vTrain's
            all_reduce table); the fitted comm parameters then only set the links it lacks.
        weights: per-case weight of the squared log error (default 1 each), e.g. to keep a
            few large configurations from being outvoted by many small ones.
        source: description stored in the calibration.

    Raises:
        PlanError: fewer cases than parameters, or a measured time <= 0.
    """
    y = np.array([c.measured_s for c in cases], float)
    if len(cases) < len(PARAMS):
        raise PlanError(f"calibration needs at least {len(PARAMS)} measured cases, "
                        f"got {len(cases)}")
    if np.any(~(y > 0)):
        raise PlanError("measured times must be > 0")
    u = np.array(U0 if u0 is None else u0, float)
    logy = np.log(y)
    sw = np.sqrt(np.ones(len(cases)) if weights is None else np.asarray(weights, float))
    if sw.shape != y.shape or np.any(~np.isfinite(sw)) or np.any(sw < 0):
        raise PlanError("weights must be one finite value >= 0 per case")
    history = []
    for it in range(iterations):
        base = predict_cases(cases, u, mapper, comm)
        grads = np.empty((len(cases), len(PARAMS)))
        for k in range(len(PARAMS)):
            h = max(1e-3, 0.05 * abs(u[k]))
            uk = u.copy()
            uk[k] += h
            grads[:, k] = (predict_cases(cases, uk, mapper, comm) - base) / h
        grads = np.maximum(grads, 0.0)

        def resid(v: np.ndarray, grads: np.ndarray = grads) -> np.ndarray:
            return (np.log(np.maximum(grads @ v, 1e-12)) - logy) * sw

        sol = least_squares(resid, u, bounds=(_LOWER, _UPPER), method="trf")
        err = np.exp(np.log(np.maximum(grads @ sol.x, 1e-12)) - logy) - 1
        history.append({"iteration": it, "linear_mape_pct": float(np.mean(np.abs(err)) * 100),
                        "simulated_mape_pct_before": float(
                            np.mean(np.abs(base / y - 1)) * 100)})
        if progress:
            progress(f"round {it + 1}: simulated MAPE at start "
                     f"{history[-1]['simulated_mape_pct_before']:.2f}%, linearised fit "
                     f"{history[-1]['linear_mape_pct']:.2f}%")
        moved = np.max(np.abs(sol.x - u) / np.maximum(np.abs(u), 1e-3))
        u = sol.x
        if moved < 1e-3:
            break
    final = predict_cases(cases, u, mapper, comm)
    fit = {"params": dict(zip(PARAMS, map(float, u), strict=True)), "cases": len(cases),
           "train_mape_pct": float(np.mean(np.abs(final / y - 1)) * 100),
           "history": history}
    return calibration_from_vector(u, source or f"fitted on {len(cases)} measured cases", fit)
