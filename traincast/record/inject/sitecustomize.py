"""The hook ``traincast record`` puts into every Python process of the recorded command.

:func:`traincast.record.run.record_command` copies this file into a private folder that it
prepends to ``PYTHONPATH``, so that Python's :mod:`site` imports it at start-up in the
command's process and in every Python process it starts (torchrun's workers inherit the
environment). It imports only the standard library and, once the training script imports it,
torch; it never imports traincast, so it works in any interpreter that has torch.

Configuration: the environment variable ``TRAINCAST_RECORD`` (JSON: ``out`` folder, ``skip``,
``unprofiled``, ``wait``, ``warmup``, ``active`` step counts, ``marker`` ``"optimizer"`` or
``"call"``). Without it the file only chains to the next ``sitecustomize`` on ``sys.path``,
which it always does last (a site's own ``sitecustomize`` is never shadowed).

Steps: a step ends at every ``step()`` of the first ``torch.optim`` optimizer that steps in
the process (``torch.optim.optimizer.register_optimizer_step_post_hook``; other optimizers'
steps are not boundaries, until that one is garbage-collected), or, with marker ``"call"``, at every
``traincast.record.step()`` call. Counting step ends: the first ``skip`` steps run untouched;
the next ``unprofiled`` steps are timed without any profiler (``time.perf_counter_ns`` between
consecutive step ends, ns; on CUDA the device is synchronised at the first and last timed
step end only); then :class:`torch.profiler.profile` (CPU activity, CUDA too when
``torch.cuda.is_available()``, shapes recorded) runs ``schedule(wait, warmup, active)`` with
an :class:`~torch.profiler.ExecutionTraceObserver` over the same active steps.

Files (``R`` = the rank: ``torch.distributed.get_rank()`` when a process group is initialised
when the profiler starts, else the ``RANK`` environment variable, else 0):

- ``rank-R.pt.trace.json.gz`` (Kineto) and ``rank-R.et.json.gz`` (execution trace), written
  under hidden temporary names and moved into place;
- ``.rank-R.status.part`` (hidden JSON, read and deleted by the parent): ``rank``,
  ``world_size``, ``pid``, ``steps`` (step ends seen), ``unprofiled_ns`` (list of int ns),
  ``active_recorded`` (complete active steps in the trace), ``complete``, ``kineto`` and
  ``et`` (files written), ``device``, ``device_name``, ``torch``, ``activities``, ``ended``
  (``"window"``, ``"exit"``, ``"interrupt"``, ``"sigterm"``).

Ending early: the profiler is stopped and its files exported at process exit (``atexit``,
which also runs after an uncaught ``KeyboardInterrupt``); while the profiler runs, SIGINT
raises ``KeyboardInterrupt`` once and later SIGINTs are ignored (torchrun forwards a second
one), and SIGTERM (left at its default by the script) raises ``SystemExit(143)`` so that the
exit handler runs. Traces are kept only when at least one active step completed. Processes
forked from a recording process (data-loader workers) record nothing.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import signal
import sys
import time
import warnings
import weakref

_ENV = "TRAINCAST_RECORD"
_HERE = os.path.dirname(os.path.abspath(__file__))
_recorder = None


def _atomic_write(final, text):
    part = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.{os.getpid()}.part")
    with open(part, "w") as f:
        f.write(text)
    os.replace(part, final)


def _gzip_into_place(plain, final):
    # lazy: every Python process of the command imports this file; only exporting ones need these
    import gzip
    import shutil

    part = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.{os.getpid()}.part")
    try:
        with open(plain, "rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(part, final)
    finally:
        for p in (part, plain):
            try:
                os.unlink(p)
            except OSError:
                pass


class _Quiet:
    """File descriptors 1 and 2 to /dev/null for the block: the profiler's C++ layers print a
    line at each start and stop, which would interleave with the script's own output."""

    def __enter__(self):
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (AttributeError, OSError, ValueError):
                pass
        try:
            self.saved = [os.dup(1), os.dup(2)]
        except OSError:  # no real descriptors: let the lines through
            self.saved = None
            return self
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        return self

    def __exit__(self, *exc):
        if self.saved:
            os.dup2(self.saved[0], 1)
            os.dup2(self.saved[1], 2)
            for fd in self.saved:
                os.close(fd)
        return False


def _rank_world():
    """(rank, world size) of this process: the process group's, else RANK/WORLD_SIZE."""
    try:
        import torch.distributed as dist  # torch: loaded by the script already

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # a broken distributed build: fall back on the environment
        pass
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


class _Recorder:
    """The step counter and the profiler of one process (module docstring)."""

    def __init__(self, cfg):
        self.out = cfg["out"]
        self.skip = max(1, int(cfg.get("skip", 2)))
        self.unprofiled = max(0, int(cfg.get("unprofiled", 5)))
        self.wait = max(0, int(cfg.get("wait", 1)))
        self.warmup = max(0, int(cfg.get("warmup", 1)))
        self.active = max(1, int(cfg.get("active", 3)))
        self.marker = cfg.get("marker", "optimizer")
        self.pid = os.getpid()
        self.steps = 0
        self.first_opt = None
        self.times = []
        self.t_last = None
        self.prof = None
        self.et = None
        self.prof_steps = 0
        self.state = "before"
        self.rank = None
        self.world = None
        self.kineto = False
        self.et_done = False
        self.keep = True
        self.ended = None
        self.device = "cpu"
        self.device_name = "cpu"
        self.activities = ["cpu"]
        self.exit_registered = False
        self.busy = False
        self.pending = None

    # ---------------------------------------------------------------- step ends
    def optimizer_hook(self, optimizer, args, kwargs):
        if self.marker != "optimizer":
            return
        held = self.first_opt() if self.first_opt is not None else None
        if held is None:  # the first optimizer, or a new one after it was discarded
            try:
                self.first_opt = weakref.ref(optimizer)
            except TypeError:
                self.first_opt = lambda: optimizer
        elif held is not optimizer:
            return
        self.step_end()

    def step_end(self):
        if os.getpid() != self.pid or self.state == "done":
            return
        self.busy = True  # a signal now waits for the end of this call (see _on_sigint)
        try:
            self._step_end()
        finally:
            self.busy = False
            pending, self.pending = self.pending, None
            if pending is not None:
                raise pending

    def _step_end(self):
        if not self.exit_registered:  # after torch's own exit handlers: runs before them
            atexit.register(self.at_exit)
            self.exit_registered = True
        self.steps += 1
        first, last = self.skip, self.skip + self.unprofiled
        if self.steps in (first, last) and self.unprofiled:
            self._sync()
        now = time.perf_counter_ns()
        if self.skip < self.steps <= last:
            self.times.append(now - self.t_last)
        self.t_last = now
        if self.steps == last:
            self.start_profiler()
        elif self.steps > last and self.prof is not None:
            with _Quiet():
                self.prof.step()
            self.prof_steps += 1
            if self.prof_steps >= self.wait + self.warmup + self.active:
                self.finish("window")
            elif self.active_recorded():
                self.write_status()  # progress: the parent (and a test) can follow it

    def _sync(self):
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:  # no usable device: the host clock alone
            pass

    # ---------------------------------------------------------------- profiler
    def _paths(self):
        r = self.rank
        return (os.path.join(self.out, f"rank-{r}.pt.trace.json.gz"),
                os.path.join(self.out, f"rank-{r}.et.json.gz"),
                os.path.join(self.out, f".rank-{r}.pt.trace.json.{self.pid}.part"),
                os.path.join(self.out, f".rank-{r}.et.json.{self.pid}.part"))

    def start_profiler(self):
        # torch: imported by the script already (this runs at its optimizer steps)
        import torch
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

        self.rank, self.world = _rank_world()
        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
            self.activities = ["cpu", "cuda"]
            if torch.cuda.is_initialized():
                self.device = "cuda"
                self.device_name = torch.cuda.get_device_name(torch.cuda.current_device())
        _, _, _, et_plain = self._paths()
        self.et = ExecutionTraceObserver().register_callback(et_plain)
        with warnings.catch_warnings():  # "won't be using warmup": the user asked for 0
            warnings.simplefilter("ignore", UserWarning)
            self.prof = profile(activities=acts, record_shapes=True,
                                schedule=schedule(wait=self.wait, warmup=self.warmup,
                                                  active=self.active, repeat=1),
                                on_trace_ready=self._export, execution_trace_observer=self.et)
        self.state = "profiling"
        self.write_status()
        self._install_signals()
        with _Quiet():
            self.prof.start()

    def active_recorded(self):
        return max(0, min(self.active, self.prof_steps - self.wait - self.warmup))

    def _export(self, prof):
        final, _, plain, _ = self._paths()
        if not self.keep:
            return
        prof.export_chrome_trace(plain)
        _gzip_into_place(plain, final)
        self.kineto = True

    def finish(self, ended):
        """Stop the profiler, export its files (if an active step completed), write the
        status; idempotent."""
        if self.state == "done" or os.getpid() != self.pid:
            return
        was_profiling = self.state == "profiling"
        self.state = "done"
        self.ended = ended
        if was_profiling:
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            except (ValueError, OSError):  # not the main thread
                pass
            self.keep = self.active_recorded() >= 1
            _, et_final, kineto_plain, et_plain = self._paths()
            try:
                with _Quiet():
                    self.prof.stop()
            finally:
                try:
                    with _Quiet():
                        self.et.unregister_callback()
                    if self.keep and os.path.exists(et_plain):
                        _gzip_into_place(et_plain, et_final)
                        self.et_done = True
                finally:
                    for p in (kineto_plain, et_plain):
                        try:
                            os.unlink(p)
                        except OSError:
                            pass
        self.write_status()

    def at_exit(self):
        if self.state == "profiling":
            self.finish(self.ended or "exit")
        elif self.state == "before":
            self.state = "done"
            self.ended = "exit"
            self.write_status()

    def write_status(self):
        if self.rank is None:
            self.rank, self.world = _rank_world()
        torch = sys.modules.get("torch")
        doc = {"rank": self.rank, "world_size": self.world, "pid": self.pid,
               "steps": self.steps, "unprofiled_ns": self.times,
               "active_recorded": self.active_recorded() if self.prof else 0,
               "complete": self.ended == "window", "kineto": self.kineto,
               "et": self.et_done, "device": self.device, "device_name": self.device_name,
               "torch": str(getattr(torch, "__version__", "")), "activities": self.activities,
               "ended": self.ended}
        try:
            _atomic_write(os.path.join(self.out, f".rank-{self.rank}.status.part"),
                          json.dumps(doc))
        except OSError:
            pass

    # ---------------------------------------------------------------- signals
    def _install_signals(self):
        try:
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._on_sigint)
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):  # not the main thread: leave the handlers alone
            pass

    def _on_sigint(self, signum, frame):
        if self.ended is None:
            self.ended = "interrupt"
            self._raise(KeyboardInterrupt())

    def _on_sigterm(self, signum, frame):
        if self.ended is None:
            self.ended = "sigterm"
            self._raise(SystemExit(128 + signal.SIGTERM))

    def _raise(self, exc):
        """Raise ``exc`` now, or at the end of the step end being handled (the profiler and
        the redirected descriptors are never left half-switched)."""
        if self.busy:
            self.pending = exc
        else:
            raise exc


def step():
    """End a step (marker ``"call"``); ``traincast.record.step()`` calls this."""
    if _recorder is not None and _recorder.marker == "call":
        _recorder.step_end()


def _on_torch_imported():
    # torch: runs right after the script's own `import torch` finished
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_recorder.optimizer_hook)


class _TorchWatch(importlib.abc.MetaPathFinder):
    """Calls :func:`_on_torch_imported` once ``import torch`` has finished (torch is imported
    only if the script imports it)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            try:
                del loader.exec_module
            except AttributeError:
                pass
            _on_torch_imported()

        loader.exec_module = exec_module
        return spec


def _start():
    global _recorder
    text = os.environ.get(_ENV)
    if not text:
        return
    try:
        cfg = json.loads(text)
        _recorder = _Recorder(cfg)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"traincast record: bad {_ENV}: {exc}", file=sys.stderr)
        return
    sys.modules["_traincast_record"] = sys.modules[__name__]
    if "torch" in sys.modules:
        _on_torch_imported()
    else:
        sys.meta_path.insert(0, _TorchWatch())


def _chain():
    """Run the next ``sitecustomize`` on ``sys.path`` (the one this file hides)."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_start()
_chain()
