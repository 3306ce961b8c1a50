"""A step's seconds from measured operator timings of its GPU (the profile cost model).

The roofline (:mod:`allocator.cost.roofline`, :mod:`allocator.cost.calibration`) prices a step from
datasheet figures and a few efficiencies. This module prices it the way Vidur (Agrawal et al.,
MLSys 2024) and LLMServingSim do: from per-operator latencies **measured** on that GPU with that
model, so a GPU the lab never ran a serving benchmark on is priced from what its kernels did.

Data: the profile bundles in ``assets/llm_profiles/`` (a subset of casys-kaist/LLMServingSim,
``profiler/perf/``, MIT licence, ``assets/llm_profiles/LICENSE-MIT``; the format is in
``assets/llm_profiles/README.md``). A bundle is one GPU x one model x one dtype, with a folder per
tensor-parallel degree; each operator was timed on a model cut to ONE decoder layer, in eager
mode, block size 16, max_num_batched_tokens 2048; times are microseconds.

The step model (:class:`ProfileCost`; ``L`` = the model's layers, from its published config)::

    step_s = L x sum over the layer's dense operators  dense_op(T)            (dense.csv)
           + embedding(T) + final_layernorm(T)                                (dense.csv, once a step)
           + L x attention(prefill_chunk, kv_prefill, n_decode, kv_decode)   (attention.csv)
           + lm_head(S) + sampler(S)                                          (per_sequence.csv)
           + 2 x L x allreduce(T)                      when tp > 1            (not in a profile)
           + ENGINE_OVERHEAD_S                                                (not in a profile)

and for a mixture of experts (architecture ``qwen3_moe``), whose layers run the attention half
of the dense operators and the expert block instead of gate_up_proj / act_fn / down_proj::

           + L x moe(dp x T / P, experts activated on this GPU)               (moe.csv)
           + 2 x L x (latency + (P-1)/P x dp x T x hidden x 2 B / link)  with expert parallelism

with ``dp`` data-parallel ranks (each one engine, every rank assumed as busy as this one) and
``P`` = dp x tp GPUs the experts are split over (1 without expert parallelism); the experts a
step activates follow :meth:`allocator.cost.calibration.ServedModel.expected_experts` (uniform
routing) and :meth:`ProfileCost.expert_coordinates` says where the block is read.

* ``T``: tokens computed in the step (prefill chunks + decodes). Which operators a layer runs,
  and how often, comes from LLMServingSim's architecture catalogues (``profiler/models/llama.yaml``,
  ``qwen3.yaml``): a layer runs ``layernorm`` twice (before attention and before the MLP), then
  ``qkv_proj``, (``qk_norm`` for Qwen3), ``rotary_emb``, ``o_proj``, ``gate_up_proj``, ``act_fn``,
  ``down_proj``; ``embedding`` and ``final_layernorm`` run once per step (:data:`ARCHITECTURES`).
* Attention at the step's prefill chunk (its tokens), the cached context the chunk attends to,
  its decodes and their mean context. The engine hands a cost model totals (prefill tokens P and
  query-key pairs PP, decodes D and their pairs DP; :meth:`allocator.engine.v1.V1Scheduler.compute`),
  so ``kv_decode`` = DP / D (the mean context: the total KV read is D x mean, which is what a
  decode kernel's time tracks) and ``kv_prefill`` = (PP - P(P+1)/2) / P, exact for one chunk and
  low when two chunks share a step (their own causal pairs are counted as one chunk's).
  LLMServingSim's skew correction (``skew_fit.csv``, for decodes of unequal length) needs each
  step's longest decode, which the totals do not carry: it is **not applied**.
* ``S``: sequences whose last position goes through ``lm_head``: the decodes plus one for a
  step with prefill (vLLM v1 computes logits at every scheduled request's last token; with the
  totals only, two prefill chunks in one step count as one -- lm_head's time is flat in S there).

Interpolation (:func:`interpolate_1d`, :class:`AttentionTable`): exact at a measured point,
linear between two measured points (on every axis of the attention grid, which doubles with
extra points at 1.5x; linear, not in log space: the kernels are linear in each axis, and
LLMServingSim's ``trace_generator`` measured log-space blending 3-5 times worse); beyond the
largest measured value, the straight line through the last two points (so the format's
"time grows with work" continues), below the smallest, the smallest point's time (a kernel has a
floor). Every step that leaves the grid is counted in :attr:`ProfileCost.off_grid` and the first
of each kind raises a :class:`ProfileGridWarning` -- never silence.

What one GPU's profile cannot hold, each a named term:

* **Tensor-parallel all-reduce** (:meth:`ProfileCost.allreduce_seconds`): two per layer for a
  dense transformer (after the attention's ``o_proj`` and after the MLP's ``down_proj``: Shoeybi
  et al., "Megatron-LM", 2019, section 3), each of ``T x hidden x 2`` bytes (bf16); a ring
  all-reduce moves ``2(p-1)/p`` of them over each GPU's link (Patarasuk and Yuan, "Bandwidth
  optimal all-reduce algorithms", 2009), plus :data:`ALLREDUCE_LATENCY_S` per all-reduce. The
  link is the GPU preset's host link (its PCIe datasheet figure, one direction): these machines
  have no NVLink. The vocabulary-parallel embedding's all-reduce and lm_head's gather (one each a
  step) are not priced.
* **Engine overhead** (:data:`ENGINE_OVERHEAD_S`): what a step costs outside the GPU's
  operators -- vLLM's scheduler, preparing the inputs, turning sampled ids into outputs.

Units: tokens, bytes, seconds (the CSVs' microseconds are converted on reading).
"""
from __future__ import annotations

import functools
import os
import re
import warnings
from dataclasses import dataclass

import numpy as np

from allocator.common.errors import FieldError
from allocator.common.paths import ASSETS, PROJECT
from allocator.cost.calibration import GPU_ALIASES, REPLAY_MODELS, ServedModel
from allocator.cost.roofline import GPU

#: Where the shipped bundles lie: ``<root>/<HARDWARE>/<org>/<model>/<variant>/``.
PROFILE_ROOT = os.path.join(ASSETS, "llm_profiles")

#: Seconds a step costs outside the operators the profiles time (vLLM v1's scheduler, input
#: preparation, output processing on the host). **An assumption, not a measurement and not a
#: fit**: the profiles cannot hold it (they time operators), the one shipped run may not be used
#: to choose it (it is the run the model is checked against), and no other run is shipped. 1 ms
#: is the order of the host-side work of one engine step of a few hundred sequences on a server
#: CPU; it was set before this model was first replayed and has not been changed since. Its share of
#: the simulated time is reported (``terms``), and ``overhead_s=`` changes it.
ENGINE_OVERHEAD_S = 1.0e-3
#: Seconds per all-reduce beyond its bytes: the link latency LLMServingSim measured on its
#: two-GPU PCIe machine (16,100 ns; ``serving/core/hardware_defaults.py``), not fitted here.
ALLREDUCE_LATENCY_S = 16.1e-6
#: Microseconds to seconds.
US = 1e-6
#: Bundle variant for each ``dtype`` a run's engine_kwargs may state.
VARIANTS = {"bfloat16": "bf16", "bf16": "bf16", "auto": "bf16", None: "bf16", "float16": "fp16", "half": "fp16",
            "fp16": "fp16", "float32": "fp32", "float": "fp32"}


class ProfileGridWarning(UserWarning):
    """A step left the profiled grid: its time was extrapolated (above) or held (below)."""


@dataclass(frozen=True)
class Architecture:
    """Which profiled operators one step runs, and how often.

    Attributes:
        per_layer: {dense operator: times per decoder layer}.
        once: {dense operator: times per step} (the prologue and the head).
        per_sequence: operators priced at the sequences producing a token.
        source: where the list comes from.
        moe: whether each layer's MLP is the expert block of ``moe.csv`` (run once a layer).
    """

    per_layer: dict
    once: dict
    per_sequence: tuple
    source: str
    moe: bool = False


_LLAMA_LAYER = {"layernorm": 2, "qkv_proj": 1, "rotary_emb": 1, "o_proj": 1, "gate_up_proj": 1, "act_fn": 1,
                "down_proj": 1}
#: The dense architectures the lab can price (a bundle's ``architecture`` in meta.yaml).
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(_LLAMA_LAYER, {"embedding": 1, "final_layernorm": 1}, ("lm_head", "sampler"),
                          "casys-kaist/LLMServingSim profiler/models/llama.yaml (sequence: prologue, pre_attn, "
                          "post_attn, mlp_dense, head)"),
    "qwen3": Architecture({**_LLAMA_LAYER, "qk_norm": 1}, {"embedding": 1, "final_layernorm": 1},
                          ("lm_head", "sampler"),
                          "casys-kaist/LLMServingSim profiler/models/qwen3.yaml (blocks.attn.full_attention, "
                          "blocks.mlp.dense, shared)"),
    "qwen3_moe": Architecture({k: v for k, v in {**_LLAMA_LAYER, "qk_norm": 1}.items()
                               if k not in ("gate_up_proj", "act_fn", "down_proj")},
                              {"embedding": 1, "final_layernorm": 1}, ("lm_head", "sampler"),
                              "casys-kaist/LLMServingSim profiler/models/qwen3.yaml (blocks.attn.full_attention, "
                              "blocks.mlp.moe: Qwen3MoeSparseMoeBlock, shared)", moe=True),
}


def _rel(path: str) -> str:
    """A path as a message shows it: relative to the project."""
    try:
        return os.path.relpath(path, PROJECT)
    except ValueError:
        return path


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def read_meta(path: str) -> dict:
    """The top-level ``key: value`` lines of a bundle's meta.yaml (strings; ``tp_degrees`` a
    list of ints). Nested blocks are skipped (the lab reads no YAML library).

    Raises:
        FieldError (``profile``): the file is missing or names no ``model``.
    """
    if not os.path.isfile(path):
        raise FieldError("profile", f": {_rel(path)} is missing", subject="profile")
    meta: dict = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s*(.*?)\s*$", line)
            if not m or not m.group(2):
                continue
            key, value = m.group(1), m.group(2).strip("'\"")
            if key == "tp_degrees":
                meta[key] = [int(v) for v in re.findall(r"\d+", value)]
            else:
                meta[key] = value
    if not meta.get("model"):
        raise FieldError("profile", f": {_rel(path)} names no model", subject="profile")
    return meta


def _read_csv(folder: str, name: str, columns: tuple):
    import pandas as pd

    for fname in (name, name + ".gz"):
        path = os.path.join(folder, fname)
        if os.path.isfile(path):
            break
    else:
        raise FieldError("profile", f": {_rel(os.path.join(folder, name))} is missing from the bundle",
                         subject="profile")
    try:
        df = pd.read_csv(path)
    except (ValueError, OSError, pd.errors.ParserError, UnicodeDecodeError):
        raise FieldError("profile", f": {_rel(path)} is not a readable CSV table", subject="profile") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FieldError("profile", f": {_rel(path)} lacks column(s) {', '.join(missing)}", subject="profile")
    num = [c for c in columns if c != "layer"]
    try:
        df = df.astype({c: float for c in num})
    except (ValueError, TypeError):
        raise FieldError("profile", f": {_rel(path)} has a non-numeric cell", subject="profile") from None
    if df.empty or not np.isfinite(df[num].to_numpy()).all() or (df[num].to_numpy() < 0).any():
        raise FieldError("profile", f": {_rel(path)} is empty or holds a negative or non-finite number",
                         subject="profile")
    return df


# ---------------------------------------------------------------------------------------------
# Interpolation
# ---------------------------------------------------------------------------------------------

def interpolate_1d(keys: np.ndarray, values: np.ndarray, x: float) -> tuple[float, str | None]:
    """``values`` at ``x`` on the measured points ``keys`` (sorted ascending, distinct).

    Exact at a key, linear between two keys; above the last key, the line through the last two
    points; below the first, the first point's value.

    Returns:
        (value, None) on the grid, or (value, "above" / "below") off it.
    """
    lo, hi = keys[0], keys[-1]
    if x < lo:
        return float(values[0]), "below"
    if x > hi:
        if len(keys) < 2:
            return float(values[-1]), "above"
        slope = (values[-1] - values[-2]) / (keys[-1] - keys[-2])
        return float(values[-1] + (x - hi) * slope), "above"
    return float(np.interp(x, keys, values)), None


class AttentionTable:
    """One layer's measured attention time on the grid (prefill_chunk, kv_prefill, n_decode,
    kv_decode), nested in that order, looked up by linear interpolation on each axis in turn.

    The grid is not a full product (the 1.5x points carry fewer neighbours; decodes with a
    prefill stop at 128), so at each axis the two neighbours are taken among the measured points
    whose own sub-grid covers the query's remaining coordinates (when those bracket the query),
    and an axis whose only measured value is 0 ("none": no prefill, so no cached context; no
    decodes, so no decode context) does not constrain the query. The point (0, 0, 0, 0) -- a step
    with no attention -- is 0 s when the file does not state it.

    Args:
        rows: float array [n, 5]: prefill_chunk, kv_prefill, n_decode, kv_decode, seconds.
    """

    AXES = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode")

    def __init__(self, rows: np.ndarray):
        nested: dict = {}
        for pc, kp, nd, kd, s in rows.tolist():
            nested.setdefault(pc, {}).setdefault(nd, {}).setdefault(kp, {})[kd] = s
        nested.setdefault(0.0, {}).setdefault(0.0, {}).setdefault(0.0, {}).setdefault(0.0, 0.0)
        # levels: pc -> nd -> kp -> kd (n_decode before kv_prefill: kv_prefill only matters with a chunk)
        self._order = (0, 2, 1, 3)               # query index of each level
        self.root = self._build(nested, 0)

    def _build(self, d: dict, level: int):
        keys = np.array(sorted(d), dtype=float)
        if level == 3:
            return (keys, np.array([d[k] for k in sorted(d)], dtype=float), None, None)
        kids = [self._build(d[k], level + 1) for k in sorted(d)]
        # each child's bounding box on the remaining levels
        boxes_lo = np.array([self._box(c)[0] for c in kids])
        boxes_hi = np.array([self._box(c)[1] for c in kids])
        return (keys, kids, boxes_lo, boxes_hi)

    @staticmethod
    def _box(node):
        keys, kids, blo, bhi = node
        if blo is None:
            return [keys[0]], [keys[-1]]
        return [keys[0], *blo.min(axis=0)], [keys[-1], *bhi.max(axis=0)]

    @property
    def largest(self) -> dict:
        """{axis name: the largest measured value on that axis} (:attr:`AXES`), e.g. the longest
        decode context the profile measured; a query past it is extrapolated (:meth:`lookup`)."""
        hi = self._box(self.root)[1]                     # in level order: pc, nd, kp, kd
        return {self.AXES[q]: float(hi[level]) for level, q in enumerate(self._order)}

    def lookup(self, prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float) -> tuple[float, list]:
        """Seconds of one layer's attention at the query, and the axes it left the grid on.

        Returns:
            (seconds, [(axis name, "above"/"below", value), ...]).
        """
        q = (float(prefill_chunk), float(kv_prefill), float(n_decode), float(kv_decode))
        off: list = []
        return self._at(self.root, q, 0, off), off

    def _at(self, node, q, level, off) -> float:
        keys, kids, blo, bhi = node
        axis = self._order[level]
        x = q[axis]
        if blo is None:                                        # the last level: kv_decode
            if len(keys) == 1 and keys[0] == 0.0:
                return float(kids[0])
            v, o = interpolate_1d(keys, kids, x)
            if o:
                off.append((self.AXES[axis], o, x))
            return v
        if len(keys) == 1 and keys[0] == 0.0:                  # "none" on this axis: not constrained
            return self._at(kids[0], q, level + 1, off)
        rest = np.array([q[a] for a in self._order[level + 1:]])
        covers = (((blo <= rest) & (rest <= bhi)) | ((blo == 0) & (bhi == 0))).all(axis=1)
        idx = np.flatnonzero(covers)
        if not len(idx) or not keys[idx[0]] <= x <= keys[idx[-1]]:
            idx = np.arange(len(keys))
        k = keys[idx]
        j = int(np.searchsorted(k, x))
        if j < len(k) and k[j] == x:
            return self._at(kids[idx[j]], q, level + 1, off)
        if j == 0:
            off.append((self.AXES[axis], "below", x))
            return self._at(kids[idx[0]], q, level + 1, off)
        if j == len(k):
            off.append((self.AXES[axis], "above", x))
            if len(k) < 2:
                return self._at(kids[idx[-1]], q, level + 1, off)
            a, b = idx[-2], idx[-1]
        else:
            a, b = idx[j - 1], idx[j]
        t = (x - keys[a]) / (keys[b] - keys[a])
        va = self._at(kids[a], q, level + 1, off)
        vb = self._at(kids[b], q, level + 1, off)
        return va + t * (vb - va)


class ExpertTable:
    """One layer's measured expert block (``moe.csv``: tokens, activated_experts, seconds),
    looked up at (tokens, experts) by linear interpolation: along ``activated_experts`` within
    each measured token count (the line through a row's last two points beyond its largest
    count: each further expert adds its weights and GEMM), then linearly between the two measured
    token counts around the query. The grid is a triangle (a step of T tokens routed to k experts
    each activates at most k x T experts; the file measures 8 ... min(128, 8T) on a doubling
    grid), so a query between two rows may lie above the smaller row's largest count without
    leaving the measured region; it leaves it (and is reported) when ``tokens`` is outside the
    measured counts or ``experts`` outside both neighbouring rows.

    Args:
        rows: float array [n, 3]: tokens, activated_experts, seconds.
    """

    AXES = ("tokens", "activated_experts")

    def __init__(self, rows: np.ndarray):
        by: dict = {}
        for t, a, sec in rows.tolist():
            by.setdefault(t, {})[a] = sec
        self.tokens = np.array(sorted(by), dtype=float)
        self.rows = [(np.array(sorted(by[t]), dtype=float), np.array([by[t][a] for a in sorted(by[t])], dtype=float))
                     for t in sorted(by)]

    def lookup(self, tokens: float, experts: float) -> tuple[float, list]:
        """Seconds of one layer's expert block, and the axes it left the grid on
        ([(axis, "above"/"below", value)])."""
        off: list = []
        t = float(tokens)
        keys = self.tokens
        j = int(np.searchsorted(keys, t))
        if j < len(keys) and keys[j] == t:
            near = [j]
        elif j == 0:
            off.append(("tokens", "below", t))
            near = [0]
        elif j == len(keys):
            off.append(("tokens", "above", t))
            near = [len(keys) - 2, len(keys) - 1] if len(keys) > 1 else [0]
        else:
            near = [j - 1, j]
        lo = min(self.rows[i][0][0] for i in near)
        hi = max(self.rows[i][0][-1] for i in near)
        if experts < lo or experts > hi:
            off.append(("activated_experts", "below" if experts < lo else "above", float(experts)))
        vals = [interpolate_1d(*self.rows[i], float(experts))[0] for i in near]
        if len(near) == 1:
            return vals[0], off
        a, b = keys[near[0]], keys[near[1]]
        return vals[0] + (t - a) / (b - a) * (vals[1] - vals[0]), off


# ---------------------------------------------------------------------------------------------
# Bundles
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProfileBundle:
    """One bundle's tables at one tensor-parallel degree (seconds, not the files' microseconds).

    Attributes:
        root: the variant folder; tp: the degree read (its ``tp<N>/`` folder).
        meta: meta.yaml's top-level fields (``hardware``, ``model``, ``architecture``, ``gpu``, ...).
        dense: {operator: (tokens float [k], seconds float [k])}.
        per_sequence: {operator: (sequences float [k], seconds float [k])}.
        attention: the :class:`AttentionTable`.
        rows: the raw tables {"dense", "per_sequence", "attention"[, "moe"]} (DataFrames, times in us).
        experts: the :class:`ExpertTable` of ``moe.csv``, or None when the folder has none.
    """

    root: str
    tp: int
    meta: dict
    dense: dict
    per_sequence: dict
    attention: AttentionTable
    rows: dict
    experts: ExpertTable | None = None

    @property
    def name(self) -> str:
        """E.g. ``"RTXPRO6000/meta-llama/Llama-3.1-8B/bf16 tp1"``."""
        parts = os.path.normpath(self.root).split(os.sep)[-4:]
        return "/".join(parts) + f" tp{self.tp}"


def _table_1d(df, key: str) -> dict:
    out = {}
    for op, g in df.groupby("layer", sort=True):
        g = g.sort_values(key).drop_duplicates(key, keep="last")
        out[str(op)] = (g[key].to_numpy(float), g["time_us"].to_numpy(float) * US)
    return out


@functools.lru_cache(maxsize=16)
def load_bundle(root: str, tp: int = 1) -> ProfileBundle:
    """Read a bundle's ``tp<tp>/`` tables (cached per folder and degree).

    Args:
        root: the variant folder (holding meta.yaml and ``tp<N>/``).
        tp: the tensor-parallel degree.

    Raises:
        FieldError (``profile``): meta.yaml or a CSV missing or malformed; ``tp`` not profiled.
    """
    meta = read_meta(os.path.join(root, "meta.yaml"))
    folder = os.path.join(root, f"tp{tp}")
    if not os.path.isdir(folder):
        have = ", ".join(str(t) for t in meta.get("tp_degrees", [])) or "none"
        raise FieldError("tensor_parallel_size", f" = {tp} was not profiled in {_rel(root)} (it holds tensor "
                         f"parallel {have}); profile tp{tp} with LLMServingSim's profiler and copy it there, "
                         "or use --cost-model roofline", subject="tensor_parallel_size")
    dense = _read_csv(folder, "dense.csv", ("layer", "tokens", "time_us"))
    per_seq = _read_csv(folder, "per_sequence.csv", ("layer", "sequences", "time_us"))
    att = _read_csv(folder, "attention.csv", ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"))
    rows = att[["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]].to_numpy(float)
    rows[:, 4] *= US
    raw = {"dense": dense, "per_sequence": per_seq, "attention": att}
    experts = None
    if any(os.path.isfile(os.path.join(folder, n)) for n in ("moe.csv", "moe.csv.gz")):
        moe = _read_csv(folder, "moe.csv", ("tokens", "activated_experts", "time_us"))
        mrows = moe[["tokens", "activated_experts", "time_us"]].to_numpy(float)
        mrows[:, 2] *= US
        experts, raw["moe"] = ExpertTable(mrows), moe
    return ProfileBundle(root, int(tp), meta, _table_1d(dense, "tokens"), _table_1d(per_seq, "sequences"),
                         AttentionTable(rows), raw, experts)


def bundles(root: str = PROFILE_ROOT) -> list[tuple[str, dict]]:
    """Every bundle under ``root``: [(variant folder, meta.yaml's fields)], sorted by folder."""
    out = []
    if not os.path.isdir(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if "meta.yaml" in filenames:
            try:
                out.append((dirpath, read_meta(os.path.join(dirpath, "meta.yaml"))))
            except FieldError:
                continue
    return sorted(out)


def gpu_matches(gpu: GPU, hardware: str) -> bool:
    """Whether a bundle's ``hardware`` label (e.g. ``"RTXPRO6000"``) names the preset ``gpu``."""
    sq = _squash(hardware)
    return sq == _squash(gpu.key) or sq in GPU_ALIASES.get(gpu.key, ())


def model_key(name: str) -> str | None:
    """The :data:`allocator.cost.calibration.REPLAY_MODELS` key of a Hugging Face name, or None."""
    k = str(name).strip().lower()
    for key, m in REPLAY_MODELS.items():
        if k == key or k in m.names:
            return key
    return None


def find_bundle(gpu: GPU, model: ServedModel, variant: str = "bf16", root: str = PROFILE_ROOT) -> str:
    """The variant folder profiling ``model`` on ``gpu``.

    Raises:
        FieldError (``cost_model``): no bundle for this GPU, model and dtype; the message names
            what is missing, what the lab holds and what would supply it.
    """
    found = bundles(root)
    for path, meta in found:
        if (gpu_matches(gpu, meta.get("hardware", "")) and model_key(meta["model"]) == model.config.key
                and meta.get("variant", os.path.basename(path)) == variant):
            return path
    have = "; ".join(f"{m.get('hardware')} {m['model']} {m.get('variant', '')}".strip() for _, m in found) or "none"
    raise FieldError("cost_model", f": no operator profile of {model.config.short.replace(' bf16', '')} ({variant}) "
                     f"on {gpu.label} in {_rel(root)} (it holds: {have}); profile it with casys-kaist/LLMServingSim's "
                     "profiler and copy the bundle there, or use --cost-model roofline", subject="cost_model")


# ---------------------------------------------------------------------------------------------
# The step model
# ---------------------------------------------------------------------------------------------

class ProfileCost:
    """One step's seconds on ``tp`` GPUs serving ``model``, from the GPU's operator profile (the
    formula is the module docstring's).

    Args:
        gpu: the GPU preset (its host link prices the all-reduce); model: the served model (its
            layers and hidden size); tp: tensor-parallel GPUs (a ``tp<N>/`` folder must exist).
        bundle: a variant folder (default: :func:`find_bundle` for ``gpu`` and ``model``).
        variant: the dtype folder (``"bf16"``).
        overhead_s: seconds per step outside the operators (default :data:`ENGINE_OVERHEAD_S`).
        allreduce_latency_s: seconds per all-reduce beyond its bytes (:data:`ALLREDUCE_LATENCY_S`).

    Raises:
        FieldError: no bundle (``cost_model``), ``tp`` not profiled (``tensor_parallel_size``), a
            bundle of another model than ``model`` or of an architecture the lab cannot price, or
            an operator the architecture runs missing from a CSV (``profile``).

    ``step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks)``
    is what :func:`allocator.engine.simulate.simulate` calls on the seconds clock.
    """

    kind = "profile"

    def __init__(self, gpu: GPU, model: ServedModel, tp: int = 1, *, bundle: str | None = None,
                 variant: str = "bf16", overhead_s: float = ENGINE_OVERHEAD_S,
                 allreduce_latency_s: float = ALLREDUCE_LATENCY_S, root: str = PROFILE_ROOT,
                 dp: int = 1, ep: bool = False):
        from allocator.common.validate import real_number, whole_number

        self.gpu, self.model = gpu, model
        self.tp = whole_number("tp", tp, 1, 64)
        self.dp = whole_number("dp", dp, 1, 64)
        self.ep = bool(ep)
        self.overhead_s = real_number("overhead_s", overhead_s, 0, 1)
        self.allreduce_latency_s = real_number("allreduce_latency_s", allreduce_latency_s, 0, 1)
        root_dir = bundle if bundle is not None else find_bundle(gpu, model, variant, root)
        b = load_bundle(root_dir, self.tp)
        self.bundle = b
        if model_key(b.meta["model"]) != model.config.key:
            raise FieldError("profile", f": {b.name} profiles {b.meta['model']}, not {model.config.short}",
                             subject="profile")
        arch_name = b.meta.get("architecture", "")
        arch = ARCHITECTURES.get(arch_name)
        if arch is None:
            raise FieldError("profile", f": {b.name} is of architecture {arch_name!r}, which the profile model "
                             f"cannot price (it knows {', '.join(ARCHITECTURES)})", subject="profile")
        self.architecture = arch
        if arch.moe != model.is_moe:
            raise FieldError("profile", f": {b.name} is of architecture {arch_name!r}, which "
                             f"{'is' if arch.moe else 'is not'} a mixture of experts, but {model.config.short} "
                             f"{'is not' if arch.moe else 'is'}", subject="profile")
        if arch.moe and b.experts is None:
            raise FieldError("profile", f": {b.name} lacks moe.csv (tp{self.tp}/moe.csv), the expert block every "
                             f"{arch_name} layer runs; profile it with LLMServingSim's profiler at tensor parallel "
                             f"{self.tp} and copy it there, or use --cost-model roofline", subject="profile")
        if model.is_moe and self.dp > 1 and not self.ep:
            raise FieldError("enable_expert_parallel", f": {model.config.short} at data_parallel_size = {self.dp} "
                             "without expert parallelism shards every expert over the dp x tp GPUs (vLLM's "
                             "data-parallel deployment), and no profile here measures a sharded expert block; "
                             "set enable_expert_parallel, or profile the sharded block", subject="enable_expert_parallel")
        for table, ops, fname in ((b.dense, [*arch.per_layer, *arch.once], "dense.csv"),
                                  (b.per_sequence, list(arch.per_sequence), "per_sequence.csv")):
            for op in ops:
                if op not in table:
                    raise FieldError("profile", f": {b.name}'s {fname} lacks operator {op!r}, which a "
                                     f"{arch_name} step runs ({arch.source})", subject="profile")
        cfg = model.config
        self.layers = cfg.layers
        # one dense table: the step's dense seconds per token count, summed over the operators
        # (every operator is measured at the same token counts in the shipped bundles; where not,
        # each is interpolated on its own)
        self._dense = [(b.dense[op], n * self.layers) for op, n in arch.per_layer.items()] + \
                      [(b.dense[op], n) for op, n in arch.once.items()]
        self._per_seq = [b.per_sequence[op] for op in arch.per_sequence]
        ring = 2.0 * (self.tp - 1) / self.tp
        self._ar_bytes_per_token = cfg.hidden_size * cfg.bytes_per_element
        self._ar_s_per_token = (2 * self.layers * ring * self._ar_bytes_per_token / gpu.host_link_bytes_per_s
                                if self.tp > 1 else 0.0)
        self._ar_fixed = 2 * self.layers * self.allreduce_latency_s if self.tp > 1 else 0.0
        #: GPUs the experts are split over: dp x tp with expert parallelism, else 1.
        self.ep_group = self.dp * self.tp if (model.is_moe and self.ep) else 1
        g = self.ep_group
        self._ep_s_per_token = (2 * self.layers * (g - 1) / g * self.dp * self._ar_bytes_per_token
                                / gpu.host_link_bytes_per_s if g > 1 else 0.0)
        self._ep_fixed = 2 * self.layers * self.allreduce_latency_s if g > 1 else 0.0
        #: {(axis, "above"/"below"): lookups (steps, for each table) that left the grid there}.
        self.off_grid: dict = {}
        self._dense_memo: dict = {}
        self._expert_memo: dict = {}
        self._warned: set = set()

    # -- labels -----------------------------------------------------------------------------
    @property
    def label(self) -> str:
        """E.g. ``"Llama 3.1 8B bf16 on NVIDIA RTX PRO 6000 Blackwell 96GB"``."""
        ranks = f" ({self.dp} data-parallel ranks{', expert parallel' if self.ep_group > 1 else ''})" \
            if self.dp > 1 else ""
        return f"{self.model.config.short} on {'' if self.tp == 1 else f'{self.tp} x '}{self.gpu.label}{ranks}"

    # -- the terms ------------------------------------------------------------------------------
    def _note(self, axis: str, where: str, value: float, grid: str) -> None:
        key = (axis, where)
        self.off_grid[key] = self.off_grid.get(key, 0) + 1
        if key not in self._warned:
            self._warned.add(key)
            how = "extrapolated along the last two measured points" if where == "above" else \
                "held at the smallest measured point"
            warnings.warn(f"{self.bundle.name}: {axis} = {value:g} is {where} the profiled {grid}; {how} "
                          "(every such step is counted in off_grid)", ProfileGridWarning, stacklevel=3)

    def dense_seconds(self, tokens: float) -> float:
        """Seconds of the step's dense operators at ``tokens`` (all layers plus the prologue and head)."""
        if tokens <= 0:
            return 0.0
        hit = self._dense_memo.get(tokens)         # a function of the token count alone: looked up once each
        if hit is None:
            total, left = 0.0, None
            for (keys, vals), n in self._dense:
                v, off = interpolate_1d(keys, vals, tokens)
                left = left or (off and (off, keys))
                total += n * v
            hit = self._dense_memo[tokens] = (total, left)
        total, left = hit
        if left:                                   # one count per step, not per operator
            self._note("tokens", left[0], tokens, f"dense grid ({left[1][0]:g}-{left[1][-1]:g} tokens)")
        return total

    def attention_seconds(self, prefill_chunk: float, kv_prefill: float, n_decode: float, kv_decode: float) -> float:
        """Seconds of the step's attention over all layers (the grid's value x layers)."""
        if prefill_chunk <= 0 and n_decode <= 0:
            return 0.0
        v, offs = self.bundle.attention.lookup(prefill_chunk, kv_prefill, n_decode, kv_decode)
        for axis, where, x in dict.fromkeys(offs):            # one count per step and axis
            self._note(axis, where, x, "attention grid")
        return self.layers * v

    def per_sequence_seconds(self, sequences: float) -> float:
        """Seconds of lm_head and the sampler for ``sequences`` sequences producing a token."""
        if sequences <= 0:
            return 0.0
        total, left = 0.0, None
        for keys, vals in self._per_seq:
            v, off = interpolate_1d(keys, vals, sequences)
            left = left or (off and (off, keys))
            total += v
        if left:
            self._note("sequences", left[0], sequences, f"per-sequence grid ({left[1][0]:g}-{left[1][-1]:g})")
        return total

    def expert_coordinates(self, tokens: float) -> tuple[float, float]:
        """Where one rank's expert block at ``tokens`` tokens is read on ``moe.csv``: (tokens, experts).

        Every data-parallel rank is assumed as busy as this one (vLLM pads a data-parallel MoE
        step to the busiest rank's tokens: vllm/v1/worker/gpu_model_runner.py, get_dp_padding), so
        dp x tokens tokens enter each GPU's experts; with expert parallelism over P = dp x tp GPUs,
        a GPU holds experts / P of them and receives about k x dp x tokens / P token-expert pairs.
        It is priced as the measured block with the same pairs -- dp x tokens / P tokens -- over the
        distinct experts of its own that those tokens activate,
        :meth:`allocator.cost.calibration.ServedModel.expected_experts` (dp x tokens, P)."""
        total = self.dp * float(tokens)
        return total / self.ep_group, float(self.model.expected_experts(total, self.ep_group))

    def expert_seconds(self, tokens: float) -> float:
        """Seconds of the step's expert blocks over all layers (0 for a dense model or no tokens):
        layers x ``moe.csv`` at :meth:`expert_coordinates`."""
        if tokens <= 0 or self.bundle.experts is None or not self.architecture.moe:
            return 0.0
        hit = self._expert_memo.get(tokens)        # a function of the token count alone
        if hit is None:
            t, a = self.expert_coordinates(tokens)
            hit = self._expert_memo[tokens] = self.bundle.experts.lookup(t, a)
        v, offs = hit
        for axis, where, x in dict.fromkeys(offs):
            self._note(axis, where, x, "expert-block grid (moe.csv)")
        return self.layers * v

    def expert_parallel_seconds(self, tokens: float) -> float:
        """Seconds of the expert-parallel dispatch and combine of a step of ``tokens`` tokens per rank:
        2 x layers x (latency + (P-1)/P x dp x tokens x hidden x 2 bytes / link), P = dp x tp GPUs.

        vLLM 0.19's default all2all backend is ``allgather_reducescatter`` (vllm/envs.py,
        VLLM_ALL2ALL_BACKEND): every MoE layer all-gathers the ranks' hidden states before the
        experts (dispatch) and reduce-scatters their outputs after (combine); a ring all-gather or
        reduce-scatter moves (P-1)/P of the gathered bytes over each GPU's link (Patarasuk and
        Yuan, 2009), the host link here (PCIe; these machines have no NVLink), plus
        :data:`ALLREDUCE_LATENCY_S` each. The router's logits gathered beside them (E values a token,
        1/16 of the hidden state's bytes for Qwen3-30B-A3B) are not priced. 0 without expert parallelism."""
        if self.ep_group == 1 or tokens <= 0:
            return 0.0
        return self._ep_fixed + self._ep_s_per_token * tokens

    def allreduce_seconds(self, tokens: float) -> float:
        """Seconds of the step's tensor-parallel all-reduces: 2 x layers x (latency + 2(p-1)/p x
        tokens x hidden x 2 bytes / link bytes/s); 0 at tp = 1 or with no tokens."""
        if self.tp == 1 or tokens <= 0:
            return 0.0
        return self._ar_fixed + self._ar_s_per_token * tokens

    @staticmethod
    def composition(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs) -> tuple:
        """The attention grid's coordinates and the sequences producing a token, from the totals the
        engine hands a cost model: (prefill_chunk, kv_prefill, n_decode, kv_decode, sequences).
        kv_prefill = (pairs - P(P+1)/2) / P (exact for one chunk; never below 0), kv_decode = the
        decodes' mean context, sequences = decodes + (1 if any prefill)."""
        p, d = float(prefill_tokens), float(decode_tokens)
        kp = max(0.0, (float(prefill_pairs) - p * (p + 1) / 2) / p) if p > 0 else 0.0
        kd = float(decode_pairs) / d if d > 0 else 0.0
        return p, kp, d, kd, d + (1.0 if p > 0 else 0.0)

    def step_terms(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs) -> dict:
        """The step's seconds term by term: {"dense_s", "attention_s", "per_sequence_s",
        "allreduce_s", "overhead_s", "experts_s", "expert_parallel_s", "seconds"} (``seconds`` their
        sum; all 0 for an empty step; the two expert terms 0 for a dense model)."""
        pc, kp, nd, kd, seqs = self.composition(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs)
        tokens = pc + nd
        if tokens <= 0:
            return dict.fromkeys(("dense_s", "attention_s", "per_sequence_s", "allreduce_s", "overhead_s",
                                  "experts_s", "expert_parallel_s", "seconds"), 0.0)
        t = {"dense_s": self.dense_seconds(tokens), "attention_s": self.attention_seconds(pc, kp, nd, kd),
             "per_sequence_s": self.per_sequence_seconds(seqs), "allreduce_s": self.allreduce_seconds(tokens),
             "overhead_s": self.overhead_s, "experts_s": self.expert_seconds(tokens),
             "expert_parallel_s": self.expert_parallel_seconds(tokens)}
        t["seconds"] = sum(t.values())
        return t

    def step_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks=0) -> float:
        """Seconds of one step (scalars). ``swapped_blocks`` is not priced: vLLM v1 preempts by
        recompute and never swaps."""
        return self.step_terms(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs)["seconds"]

    def terms(self) -> dict:
        """The model's constants, named, for the page and --json."""
        return {"bundle": self.bundle.name, "architecture": self.bundle.meta.get("architecture"),
                "profiled_gpu": self.bundle.meta.get("gpu"), "vllm_version": self.bundle.meta.get("vllm_version"),
                "layers": self.layers, "overhead_s": self.overhead_s,
                "allreduce_latency_s": self.allreduce_latency_s if self.tp > 1 else 0.0,
                "allreduce_s_per_token": self._ar_s_per_token, "link": self.gpu.host_link,
                "skew_correction": "not applied (needs each step's longest decode)",
                "data_parallel": self.dp, "expert_parallel_gpus": self.ep_group,
                "expert_parallel_s_per_token": self._ep_s_per_token,
                "expert_parallel_s_per_step": self._ep_fixed}

    def off_grid_summary(self) -> dict:
        """{"<axis> <above/below>": steps} of the lookups that left the grid so far."""
        return {f"{a} {w}": n for (a, w), n in sorted(self.off_grid.items())}


__all__ = ["ProfileCost", "ProfileBundle", "AttentionTable", "ExpertTable", "ProfileGridWarning", "ARCHITECTURES",
           "ENGINE_OVERHEAD_S", "ALLREDUCE_LATENCY_S", "PROFILE_ROOT", "VARIANTS", "find_bundle", "load_bundle",
           "bundles", "interpolate_1d", "read_meta", "gpu_matches", "model_key"]
