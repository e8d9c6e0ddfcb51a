"""Traces: every step of a forward — its name, op, input shapes, output shape and axes, time, and
its tensor — as the engine's tracer recorded it. A Trace prints as the command line's table,
dumps the trace format `vkattn diff` reads, and shows itself in a notebook as the trace explorer's
page (Trace.report)."""
import html
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from . import _vkattn, hooks

@dataclass(frozen=True)
class Step:
    index: int
    name: str                 # q_proj, split_heads_q, attention_scores, softmax, …
    op: str                   # the operation = shader = reference function: linear, split_heads, …
    inputs: Tuple[dict, ...]  # each {"name", "shape", "dtype"} (and "stored_as" as below)
    shape: Tuple[int, ...]    # the output's
    dims: Tuple[str, ...]     # its axis names: b, h, i, j, …
    dtype: str
    start_us: Optional[float]  # on the step's clock (the GPU's timestamps where there are)
    time_us: Optional[float]
    values: Optional[np.ndarray]  # the output, when traced with values, in the order of its shape
    # A layout step (split_heads, merge_heads) folded into its neighbour on the GPU: how
    # ("folded into q_proj's store: …"), its time 0. None for a step that ran.
    folded: Optional[str] = None
    # The order the output lies in on the device when not its shape's own: q_proj's (B, T, E)
    # stored as (B, H, T, d) where split_heads_q was folded into it. None: its shape's order.
    stored_as: Optional[Tuple[int, ...]] = None

    def __repr__(self):
        shapes = " ".join(str(tuple(i["shape"])) for i in self.inputs)
        return f"Step({self.index} {self.name} [{self.op}] {shapes} -> {self.shape})"


class Trace:
    """One recorded forward. trace["softmax"] is a step's tensor; trace.steps every step."""

    def __init__(self, impl, reference=None, values=True, weights=None):
        self._impl = impl
        self.reference = reference   # the CPU reference's Trace, side by side
        self.weights = weights       # what the forward returned as attention weights (or None)
        self.steps = [Step(d["index"], d["name"], d["op"], tuple(d["inputs"]), d["shape"], d["dims"], d["dtype"],
                           d["start_us"], d["time_us"], d["values"] if values else None, d["folded"],
                           d["stored_as"]) for d in impl.steps()]

    backend = property(lambda self: self._impl.backend, doc='"gpu" or "cpu"')
    device = property(lambda self: self._impl.device, doc="the device's name")
    clock = property(lambda self: self._impl.clock, doc='"gpu" (timestamps) or "host"')
    error = property(lambda self: self._impl.error, doc="the error that stopped the pass, if one did")

    def __getitem__(self, name):
        """A step's tensor by its name, or by TransformerLens's hook name (vkattn.hooks)."""
        for step in self.steps:
            if step.name == name:
                if step.values is None:
                    raise KeyError(f"{name}: traced without values")
                return step.values
        if name.startswith(("blocks.", "hook_", "ln_final.")):
            return hooks.hook_values(self, name)
        raise KeyError(f"{name}: no such step; the steps are {', '.join(s.name for s in self.steps)}")

    def hooks(self):
        """A TransformerLens-style cache: {hook name: tensor} for every hook the steps answer to."""
        return {name: hooks.hook_values(self, name) for name in hooks.hook_names(self)}

    def __len__(self):
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def table(self, values=False, atol=1e-5, rtol=1e-5):
        """The command line's table (with values: a few leading values and min/max/mean per step);
        side by side, the GPU's and the CPU reference's times and their largest difference."""
        if self.reference is not None:
            return _vkattn._side_by_side(self._impl, self.reference._impl, atol, rtol, values)
        return self._impl.table(values)

    def dump(self, directory, values=True):
        """DIR/trace.json, DIR/timeline.json and (with values) DIR/NNN_<step>.npy: what
        `vkattn run --trace DIR --trace-values` writes, so `vkattn diff` and load_trace read it."""
        self._impl.dump(str(directory), values)

    def __repr__(self):
        return self.table()

    def report(self, path=None, against=None, title=None, atol=1e-5, rtol=1e-5):
        """The trace explorer's page (what `vkattn report` writes): every step, its tensor as
        heatmaps, the times as a timeline; against another Trace of the same recipe (by default
        the CPU reference of a side-by-side trace), both and their difference, opened at the
        first divergent element. Written to `path` when given; returns the HTML."""
        other = against if against is not None else self.reference
        labels = (self.backend, other.backend) if other is not None else (self.backend, "")
        if other is not None and labels[0] == labels[1]:
            labels = ("A", "B")
        page = _vkattn._report(self._impl, other._impl if other is not None else None, labels[0], labels[1],
                               title or f"vkattn trace: {self.backend} ({self.device})", atol, rtol)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def _repr_html_(self):
        """The explorer's page inline in a notebook, in a frame of its own (its script and style
        stay out of the notebook's)."""
        page = html.escape(self.report(), quote=True)
        return f'<iframe srcdoc="{page}" style="width: 100%; height: 900px; border: 0"></iframe>'


def load_trace(directory):
    """A trace dump (vkattn run --trace DIR, Trace.dump) read back, with its values where it has them."""
    return Trace(_vkattn.load_trace(str(directory)))
