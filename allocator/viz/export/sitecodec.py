"""Compact encodings for the exported static site (``allocator.viz.export.site``), and their decoders.

The site carries, for every block size of the sweep, the explainer figure that
``allocator.viz.explainer_chart.explainer_figure`` draws. Stored as plotly writes it, that is about 1.9 MB per
block size (each animation frame carries two 2,048-cell maps as base64 arrays and two readouts), so
the frames are stored in two compact forms, decoded in the browser by ``site_static/site.js``:

* **maps as runs**: a frame's memory map is a row-major grid of (colour code, owning request)
  pairs; neighbouring slots mostly belong to the same request, so the grid is written as runs
  ``[code, owner, length, code, owner, length, ...]`` of small integers (gzip-friendly JSON).
* **frames as a template**: every frame's layout is the same dicts with only the readout texts
  and the cursor's position changing; those are stored per frame, the rest once.

Then :func:`pool_refs` stores every larger JSON subtree that occurs more than once (the reserve-max
map's hover texts and lines, equal at every block size; the sweep chart's curves, equal at every
block-size position) once, as ``{"$ref": i}`` pointing into a pool.

The Python decoders here (:func:`decode_runs`, :func:`decode_frames`, :func:`resolve_refs`) mirror
the JavaScript ones line for line; tests/core/test_site.py checks both round trips against the figure.
"""
from __future__ import annotations

import base64
import copy
import json

import numpy as np

#: plotly.js typed-array dtype codes (``allocator.viz.explainer_chart._typed``) -> numpy dtypes.
_DTYPES = {"i1": np.int8, "u1": np.uint8, "i2": np.int16, "u2": np.uint16, "i4": np.int32, "u4": np.uint32,
           "f4": np.float32, "f8": np.float64}
#: Code written for a padding cell (NaN in the figure: the grid's unused tail), decoded as null.
PAD = -1
#: A subtree must serialise to at least this many characters to be shared through the pool.
MIN_SHARED_CHARS = 160


def typed_to_array(spec) -> np.ndarray:
    """A plotly typed-array spec ``{"dtype", "bdata", "shape"}`` (or a nested list) as a numpy array.

    Raises:
        ValueError: an unknown dtype code.
    """
    if not isinstance(spec, dict):
        return np.asarray(spec)
    if spec["dtype"] not in _DTYPES:
        raise ValueError(f"dtype = {spec['dtype']!r} is not a plotly typed-array code")
    arr = np.frombuffer(base64.b64decode(spec["bdata"]), dtype=_DTYPES[spec["dtype"]])
    shape = [int(n) for n in str(spec.get("shape", len(arr))).split(",")]
    return arr.reshape(shape)


def encode_runs(z: np.ndarray, owner: np.ndarray) -> list[int]:
    """A map's two grids (same shape: colour codes, owning request ids) as one flat run list.

    Args:
        z: heatmap codes, shape (rows, cols); integers, or floats with NaN for padding cells.
        owner: request id per cell (0 = none), same shape.

    Returns:
        ``[code, owner, length, ...]`` over the row-major cells; a NaN code is written as :data:`PAD`.

    Raises:
        ValueError: the shapes differ.
    """
    z, owner = np.asarray(z), np.asarray(owner)
    if z.shape != owner.shape:
        raise ValueError(f"map shapes differ: codes {z.shape}, owners {owner.shape}")
    zf = z.ravel()
    codes = np.where(np.isnan(zf), PAD, zf).astype(np.int64) if zf.dtype.kind == "f" else zf.astype(np.int64)
    owners = owner.ravel().astype(np.int64)
    if not len(codes):
        return []
    change = np.flatnonzero((codes[1:] != codes[:-1]) | (owners[1:] != owners[:-1])) + 1
    starts = np.concatenate([[0], change])
    lengths = np.diff(np.concatenate([starts, [len(codes)]]))
    out = np.empty(3 * len(starts), dtype=np.int64)
    out[0::3], out[1::3], out[2::3] = codes[starts], owners[starts], lengths
    return out.tolist()


def decode_runs(runs: list[int], cols: int) -> tuple[list, list]:
    """The inverse of :func:`encode_runs`: (codes, owners) as nested lists of ``cols`` per row,
    a padding code as None (what the JavaScript decoder hands plotly)."""
    codes, owners = [], []
    for i in range(0, len(runs), 3):
        code, who, n = runs[i], runs[i + 1], runs[i + 2]
        codes += [None if code == PAD else code] * n
        owners += [who] * n
    return ([codes[i:i + cols] for i in range(0, len(codes), cols)],
            [owners[i:i + cols] for i in range(0, len(owners), cols)])


def _blank(layout: dict) -> dict:
    """A frame's layout with what changes from frame to frame (readout texts, cursor x) removed."""
    out = copy.deepcopy(layout)
    for a in out.get("annotations", []):
        a.pop("text", None)
    for s in out.get("shapes", []):
        s.pop("x0", None)
        s.pop("x1", None)
    return out


def encode_frames(frames: list[dict]) -> dict:
    """The explainer figure's animation frames in compact form.

    Args:
        frames: ``fig.to_dict()["frames"]`` of ``explainer_figure``: each ``{"name", "traces",
            "data": [heatmap {"z", "customdata"} per map], "layout": {"annotations", "shapes"}}``.

    Returns:
        ``{"traces", "cols", "template", "names", "texts", "x", "maps"}``: ``template`` the frames'
        shared layout, per frame its name, its readout texts, its cursor position and its maps as
        runs (:func:`encode_runs`).

    Raises:
        ValueError: frames that do not share one layout template or one set of traces (the encoding
            would lose something; nothing is written).
    """
    if not frames:
        return {"traces": [], "cols": 0, "template": {}, "names": [], "texts": [], "x": [], "maps": []}
    template = _blank(frames[0].get("layout", {}))
    traces = frames[0]["traces"]
    out = {"traces": traces, "template": template, "names": [], "texts": [], "x": [], "maps": []}
    cols = None
    for f in frames:
        layout = f.get("layout", {})
        if _blank(layout) != template or f["traces"] != traces:
            raise ValueError(f"frame {f.get('name')!r} does not share the first frame's layout; cannot encode it")
        xs = {(s["x0"], s["x1"]) for s in layout.get("shapes", [])}
        if len(xs) > 1 or any(a != b for a, b in xs):
            raise ValueError(f"frame {f.get('name')!r} has cursors at different positions; cannot encode it")
        out["names"].append(f["name"])
        out["texts"].append([a["text"] for a in layout.get("annotations", [])])
        out["x"].append(next(iter(xs))[0] if xs else None)
        maps = []
        for d in f["data"]:
            z, owner = typed_to_array(d["z"]), typed_to_array(d["customdata"])
            cols = z.shape[-1]
            maps.append(encode_runs(z, owner))
        out["maps"].append(maps)
    out["cols"] = cols
    return out


def decode_frames(enc: dict) -> list[dict]:
    """The inverse of :func:`encode_frames`, with maps as nested lists (as the JavaScript decoder
    builds them): plotly draws the same frames."""
    frames = []
    for i, name in enumerate(enc["names"]):
        layout = copy.deepcopy(enc["template"])
        for a, text in zip(layout.get("annotations", []), enc["texts"][i]):
            a["text"] = text
        for s in layout.get("shapes", []):
            s["x0"] = s["x1"] = enc["x"][i]
        data = []
        for runs in enc["maps"][i]:
            z, owner = decode_runs(runs, enc["cols"])
            data.append({"type": "heatmap", "z": z, "customdata": owner})
        frames.append({"name": name, "traces": list(enc["traces"]), "data": data, "layout": layout})
    return frames


def plain_frames(frames: list[dict]) -> list[dict]:
    """``frames`` with typed arrays as nested lists (NaN as None): the form :func:`decode_frames`
    returns, for comparing the two."""
    def plain(spec):
        arr = typed_to_array(spec)
        if arr.dtype.kind == "f":
            return [[None if np.isnan(v) else int(v) for v in row] for row in arr]
        return arr.tolist()

    out = []
    for f in frames:
        f = copy.deepcopy(f)
        f["data"] = [dict(d, z=plain(d["z"]), customdata=plain(d["customdata"])) for d in f["data"]]
        out.append(f)
    return out


def _key(node) -> str:
    return json.dumps(node, separators=(",", ":"), sort_keys=True, allow_nan=False)


def pool_refs(tree, min_chars: int = MIN_SHARED_CHARS) -> tuple[object, list]:
    """Store each JSON subtree (dict or list) of at least ``min_chars`` characters that occurs more
    than once in ``tree`` once, in a pool, and put ``{"$ref": index}`` in its places.

    Args:
        tree: plain JSON data (dicts, lists, str, numbers, bool, None); dicts must not use the
            key "$ref".

    Returns:
        (the tree with references, the pool); :func:`resolve_refs` undoes it.

    Raises:
        ValueError: a dict already holding a "$ref" key (it would be read as a reference).
    """
    counts: dict[str, int] = {}
    keys: dict[int, str] = {}         # id(subtree) -> its _key, each built once from its children's
    leaf = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

    def count(node) -> str:
        """The subtree's _key (bottom up: a node's text is its children's texts joined, so no
        subtree is written twice), counting the long ones."""
        if isinstance(node, dict):
            if "$ref" in node:
                raise ValueError("a dict with the key '$ref' cannot be pooled")
            if not all(type(name) is str for name in node):
                for c in node.values():
                    count(c)
                k = _key(node)                 # keys json.dumps turns into text: let it say how
            else:
                k = "{" + ",".join(leaf(name) + ":" + count(node[name]) for name in sorted(node)) + "}"
        elif isinstance(node, list):
            if any(isinstance(c, (dict, list)) for c in node):
                k = "[" + ",".join([count(c) for c in node]) + "]"
            else:                              # a list of scalars (most of a figure's data): one C call
                k = leaf(node)
        else:
            return leaf(node)
        keys[id(node)] = k
        if len(k) >= min_chars:
            counts[k] = counts.get(k, 0) + 1
        return k

    count(tree)
    pool: list = []
    index: dict[str, int] = {}

    def swap(node, top=False):
        if not isinstance(node, (dict, list)):
            return node
        k = keys[id(node)] if not top else None
        if k is not None and counts.get(k, 0) > 1:
            if k not in index:
                index[k] = len(pool)
                pool.append(None)
                pool[index[k]] = swap(node, top=True)
            return {"$ref": index[k]}
        if isinstance(node, dict):
            return {name: swap(v) for name, v in node.items()}
        return [swap(v) for v in node]

    return swap(tree), pool


def resolve_refs(node, pool: list):
    """The inverse of :func:`pool_refs`: a fresh copy of ``node`` with every reference replaced."""
    if isinstance(node, list):
        return [resolve_refs(v, pool) for v in node]
    if isinstance(node, dict):
        if len(node) == 1 and "$ref" in node:
            return resolve_refs(pool[node["$ref"]], pool)
        return {k: resolve_refs(v, pool) for k, v in node.items()}
    return node
