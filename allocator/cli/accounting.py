"""``python -m allocator account ...`` and ``python -m allocator capacity ...``.

Both print the figures the Accounting and Capacity pages show, from the same functions in
:mod:`allocator.accounting`; ``--json`` prints one JSON object instead of text. Bad input
raises :class:`allocator.common.validate.FieldError` naming the field (``__main__`` turns it into one
line on stderr, exit 2). Every numeric option -- and every entry of a list option -- is checked
against its range in :data:`allocator.common.limits.LIMITS` before anything is computed, whether or not
it is used; an option that does not apply is named in one ``note:`` line on stderr.

Examples (``assets/reference_figures.md`` R1-R3 and R5)::

    python -m allocator account --lengths 5,9,17 --reserve 32 --metadata-cost 1 --json
    python -m allocator capacity --model 7b-fp16 --free-gib 66 --max-context 2048 \\
        --mean-tokens 350 --block-size 16 --json
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from allocator import accounting as acc
from allocator.accounting.kv_configs import (CONFIG_KEYS, KV_CACHE_DTYPES, fp8_scale_bytes, kv_alternatives,
                                             kv_variant, model_kv)
from allocator.accounting.slots import parse_numbers
from allocator.common.limits import check
from allocator.common.formats import plural, ratio
from allocator.common.errors import FieldError
from allocator.common.validate import show

from allocator.cli.common import ACCEPTANCE_WORDS, count_arg, note, range_help, real_arg
from allocator.viz.claims.capacity import factors_text, fp8_scale_text, speculation_text, variant_label, window_note
from allocator.accounting.speculation import speculation_capacity

# Defaults are the pages' defaults (allocator.accounting.*_DEFAULTS), so a command with only the
# required flags prints what the page first shows.
_A = acc.ACCOUNT_DEFAULTS
_C = acc.CAPACITY_DEFAULTS


def _parse_list(text: str, name: str, what: str) -> list:
    """Parse ``"a,b,c"`` and check every entry against ``LIMITS[name]``; FieldError with field
    ``name`` and ``.index`` naming the entry, the value and the allowed range."""
    return [check(name, v, index=i) for i, v in enumerate(parse_numbers(text, name, what=what))]


def _check_options(args: argparse.Namespace, names: dict[str, str]) -> None:
    """Check each given numeric option (attribute -> LIMITS field) before anything is computed."""
    for attr, field in names.items():
        value = getattr(args, attr)
        if value is not None:
            check(field, value, subject=attr if attr != field else None)


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f} %"


def _cost(value: float) -> str:
    return f"{value:g}"


# --------------------------------------------------------------------------------------------
# account
# --------------------------------------------------------------------------------------------

def run_account(args: argparse.Namespace) -> int:
    """Print reserve-max vs paged slots, the block-size table and, if asked, prefix sharing.

    Raises:
        FieldError: an option out of its range (checked first, all of them), a list entry out of
            range (``lengths[1]``, ``candidates[0]``) or a figure the lengths cannot have (a length
            above the reserve), naming the field.
    """
    _check_options(args, {"reserve": "reserve", "metadata_cost": "metadata_cost", "block_size": "block_size",
                          "pool_slots": "pool_slots", "share_block_size": "block_size"})
    lengths = _parse_list(args.lengths, "lengths", "request length (tokens)")
    candidates = _parse_list(args.candidates, "candidates", "block size (slots per block)")
    sharing = None
    if args.share:
        parts = parse_numbers(args.share, "share", what="length_a,length_b,prefix_tokens")
        if len(parts) != 3:
            raise FieldError("share", " must be three numbers: length_a,length_b,prefix_tokens")
        parts = [check(name, v) for name, v in zip(("length_a", "length_b", "prefix_tokens"), parts)]
        sharing = (parts[0], parts[1], parts[2], args.share_block_size)
    report = acc.account(lengths, args.reserve, args.metadata_cost, block_size=args.block_size,
                         candidates=candidates, pool_slots=args.pool_slots, sharing=sharing)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0

    res, paged = report["reserve_max"], report["paged"]
    print(f"requests (tokens): {', '.join(map(str, lengths))}  = {res['used_tokens']} tokens")
    print(f"reserve-max ({res['reserve']} slots each): {res['allocated_slots']} slots allocated, "
          f"{res['unused_slots']} unused ({_percent(res['waste_fraction'])} waste)")
    print(f"paged (blocks of {paged['block_size']}): {paged['allocated_slots']} slots in "
          f"{paged['blocks']} blocks, {paged['unused_slots']} unused "
          f"({_percent(paged['waste_fraction'])} waste)")
    if "pool" in report:
        pool = report["pool"]
        gain = f" ({ratio(pool['paged_gain'])})" if pool["paged_gain"] else ""
        print(f"pool of {pool['pool_slots']} slots fits {pool['fit_reserve']} requests "
              f"reserve-max vs {pool['fit_paged']} paged{gain}")
    print(f"\nmetadata cost c = {_cost(report['metadata_cost'])} slot-equivalents per block")
    print(f"{'block':>6} {'slots':>8} {'unused':>8} {'blocks':>8} {'total cost':>12}")
    for row in report["block_sizes"]:
        mark = "  <- best" if row["is_best"] else ""
        print(f"{row['block_size']:>6} {row['allocated_slots']:>8} {row['unused_slots']:>8} "
              f"{row['blocks']:>8} {_cost(row['total_cost']):>12}{mark}")
    if "prefix_sharing" in report:
        ps = report["prefix_sharing"]
        print(f"\nprefix sharing: lengths {ps['length_a']} and {ps['length_b']}, "
              f"{ps['prefix_tokens']}-token prefix, blocks of {ps['block_size']}")
        print(f"  logical tokens {ps['logical_tokens']} | slots without sharing "
              f"{ps['slots_unshared']} | distinct physical slots {ps['slots_shared']} "
              f"({ps['shared_blocks']} shared blocks save {ps['saved_slots']} slots)")
    return 0


# --------------------------------------------------------------------------------------------
# capacity
# --------------------------------------------------------------------------------------------

def _model_from_args(args: argparse.Namespace) -> tuple[str, int]:
    """Return (label, bytes per token) for ``--model`` or the custom ``--layers`` ... flags. A
    shipped config (``assets/model_configs/``) gives its bytes per token as configured, every layer
    keeping every token, in ``--kv-cache-dtype``."""
    custom = [args.layers, args.kv_heads, args.head_dim]
    bytes_per_element = 2 if args.bytes_per_element is None else args.bytes_per_element
    if any(v is not None for v in custom):
        missing = [name for name, v in zip(("layers", "kv_heads", "head_dim"), custom) if v is None]
        if missing:
            raise FieldError(missing[0], " must all be given for a custom model",
                             subject="--layers, --kv-heads and --head-dim")
        bpt = acc.kv_bytes_per_token(args.layers, args.kv_heads, args.head_dim, bytes_per_element)
        return (f"custom ({args.layers} layers x {args.kv_heads} KV heads x {args.head_dim}, "
                f"{bytes_per_element} bytes per element)", bpt)
    if args.model in CONFIG_KEYS:
        model = model_kv(args.model)
        row = kv_variant(model, model.scheme, args.kv_cache_dtype or "auto", model.window_layers > 0,
                         0, 1, 1, 1)
        return f"{model.name} (config.json: {model.source}, read {model.read})", row.bytes_per_token
    model = acc.model_config(args.model or _C["model"])
    return model.label, model.bytes_per_token


def _config_report(args: argparse.Namespace, cap: acc.Capacity) -> dict | None:
    """For a shipped config: its factors, what is unconfirmed, and every alternative priced with the
    command's memory, max context, mean and block size (None for a preset or a custom model)."""
    if args.model not in CONFIG_KEYS or args.layers is not None or args.kv_heads is not None \
            or args.head_dim is not None:
        return None
    model = model_kv(args.model)
    rows = kv_alternatives(model, args.kv_cache_dtype or "auto", cap.free_bytes, cap.max_context,
                           cap.mean_tokens, cap.block_size)
    fp8 = next(r for r in rows if r.kv_cache_dtype == "fp8")
    return {"model": model, "rows": rows,
            "json": {"name": model.name, "source": model.source, "read": model.read,
                     "unconfirmed": model.unconfirmed, "layers": model.layers,
                     "window_layers": model.window_layers, "sliding_window": model.sliding_window,
                     "fp8_scale_bytes": fp8_scale_bytes(model),
                     "factors": factors_text(model, rows[0]),
                     "alternatives": [dict(r.to_dict(), label=variant_label(model, r)) for r in rows]},
            "fp8": fp8}


def run_capacity(args: argparse.Namespace) -> int:
    """Print per-token and per-sequence bytes, waste and the sequences that fit both ways.

    Raises:
        FieldError: an option out of its range (checked first, all of them, used or not), neither
            or both of ``--mean-tokens`` and ``--lengths``, a partial custom model, naming the field.
    """
    _check_options(args, {name: name for name in ("free_gib", "max_context", "mean_tokens", "block_size",
                                                  "layers", "kv_heads", "head_dim", "bytes_per_element",
                                                  "acceptance_rate")})
    if args.acceptance_rate is not None and args.lengths is not None:
        raise FieldError("acceptance_rate", f" = {show(args.acceptance_rate)}: the speculation table pages a "
                         "mean length; give --mean-tokens instead of --lengths")
    if args.kv_cache_dtype is not None and args.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise FieldError("kv_cache_dtype", f" = {args.kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
    if args.lengths is None and args.mean_tokens is None:
        raise FieldError("mean_tokens", " is missing: give --mean-tokens (the mean length used) or --lengths "
                         "(the lengths themselves)")
    if args.lengths is not None and args.mean_tokens is not None:
        raise FieldError("mean_tokens", " and --lengths were both given: give --mean-tokens or --lengths, "
                         "not both")
    used: object = (_parse_list(args.lengths, "lengths", "request length (tokens)") if args.lengths is not None
                    else args.mean_tokens)
    label, bpt = _model_from_args(args)
    free_bytes = acc.gib_to_bytes(args.free_gib, "free_gib")
    cap = acc.capacity(bpt, free_bytes, args.max_context, used, args.block_size)
    custom = args.layers is not None or args.kv_heads is not None or args.head_dim is not None
    unused = []
    if custom and args.model is not None:
        unused.append("--model is ignored: --layers, --kv-heads and --head-dim describe a custom model")
    if not custom and args.bytes_per_element is not None:
        unused.append("--bytes-per-element applies only to a custom model (--layers, --kv-heads, --head-dim); "
                      "ignored")
    if args.kv_cache_dtype is not None and (custom or args.model not in CONFIG_KEYS):
        unused.append("--kv-cache-dtype applies only to a shipped model config (--model "
                      f"{'|'.join(CONFIG_KEYS)}); ignored")
    note(unused)
    config = None if args.lengths is not None else _config_report(args, cap)
    spec = None if args.acceptance_rate is None else speculation_capacity(cap, args.acceptance_rate)
    if args.json:
        out = {"model": "custom" if custom else (args.model or _C["model"]), "model_label": label,
               **cap.to_dict()}
        if config:
            out["kv_config"] = config["json"]
        if spec:
            out["speculation"] = {"acceptance_rate": args.acceptance_rate, "rows": [asdict(r) for r in spec]}
        print(json.dumps(out, indent=2))
        return 0

    fb = acc.format_bytes
    print(f"model: {label}")
    print(f"KV per token: {fb(cap.bytes_per_token)} ({cap.bytes_per_token:,} bytes)")
    print(f"free memory: {fb(cap.free_bytes)}; max context {cap.max_context:,} tokens; "
          f"mean used {cap.mean_tokens:g} tokens; block size {cap.block_size}")
    print(f"reserve-max: {fb(cap.reserved_bytes)} reserved, {fb(cap.used_bytes)} used per "
          f"sequence, {_percent(cap.waste_fraction_reserve)} waste -> {plural(cap.fit_reserve, 'sequence')}")
    print(f"paged: {cap.paged_blocks:g} blocks = {cap.paged_slots:g} slots "
          f"({cap.paged_unused_slots:g} unused) = {fb(cap.paged_bytes)} per sequence, "
          f"{_percent(cap.waste_fraction_paged)} waste -> {plural(cap.fit_paged, 'sequence')}")
    print(f"twice the memory, reserve-max: {plural(cap.fit_reserve_double, 'sequence')} | "
          f"fix the allocator, same memory: {plural(cap.fit_paged, 'sequence')}")
    if config:
        model, rows = config["model"], config["rows"]
        print(f"\n{model.name}, factor by factor: {factors_text(model, rows[0])}")
        for field, why in model.unconfirmed.items():
            print(f"  not confirmed: {field}: {why}")
        note_text = window_note(model, rows[0].bytes_per_token, "The lines above", "below")
        if note_text:
            print("  " + note_text)
        print(f"  {fp8_scale_text(model, config['fp8'])}")
        print(f"  {'variant':<78} {'bytes/token':>12} {'reserved/seq':>14} {'paged/seq':>12} "
              f"{'reserve-max':>11} {'paged':>7}")
        for r in rows:
            print(f"  {variant_label(model, r):<78} {r.bytes_per_token:>12,} {r.reserved_bytes:>14,} "
                  f"{r.paged_bytes:>12,} {r.fit_reserve:>11,} {r.fit_paged:>7,}")
    if spec:
        print(f"\nspeculative decoding, k draft tokens a step (k lookahead slots a sequence):")
        print(f"  {'k':>2} {'blocks/seq':>10} {'KV/seq':>11} {'sequences':>9} {'fewer':>5} "
              f"{'tokens/step (model)':>19} {'rejected/step (model)':>21}")
        for r in spec:
            print(f"  {r.k:>2} {r.blocks:>10,} {fb(r.bytes):>11} {r.fit:>9,} {r.fewer:>5,} "
                  f"{r.tokens_per_step:>19.2f} {r.rejected_per_step:>21.2f}")
        print("  " + speculation_text(cap, spec, args.acceptance_rate))
    return 0


# --------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``account`` and ``capacity`` sub-commands to ``subparsers``."""
    p = subparsers.add_parser(
        "account", help="slots under reserve-max vs paging, best block size, prefix sharing",
        description="Slot accounting for a list of request lengths (assets/reference_figures.md R1-R4).")
    p.add_argument("--lengths", required=True,
                   help=f"request lengths in tokens, e.g. 5,9,17 (each {range_help('lengths')})")
    p.add_argument("--reserve", type=count_arg, required=True,
                   help=f"slots reserved per request under reserve-max (the maximum length; {range_help('reserve')})")
    p.add_argument("--metadata-cost", type=real_arg, default=_A["metadata_cost"],
                   help=f"c: cost of one block, in slot-equivalents (default 1; {range_help('metadata_cost')})")
    # --page-size / --share-page-size: the flags' older names, still accepted so scripts keep working.
    p.add_argument("--block-size", "--page-size", dest="block_size", type=count_arg, default=_A["block_size"],
                   help=f"slots per block for the paged summary (default 4; {range_help('block_size')})")
    p.add_argument("--candidates", default=",".join(map(str, _A["candidates"])),
                   help="candidate block sizes, comma-separated (default 1,2,4,8,16,32 as in reference "
                        "figure R2; the powers of two up to 256 are 1,2,4,8,16,32,64,128,256; each "
                        f"{range_help('candidates')})")
    p.add_argument("--pool-slots", type=count_arg, default=_A["pool_slots"],
                   help="count the requests that fit in a pool of this many slots "
                        f"(default 40960, reference figure R4; {range_help('pool_slots')})")
    p.add_argument("--share", default=",".join(map(str, _A["share"][:3])),
                   help="prefix sharing: length_a,length_b,prefix_tokens (default 20,23,8, "
                        "reference figure R3)")
    p.add_argument("--share-block-size", "--share-page-size", dest="share_block_size", type=count_arg,
                   default=_A["share"][3], help=f"slots per block for --share (default 4; {range_help('block_size')})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_account)

    q = subparsers.add_parser(
        "capacity", help="sequences that fit in GPU memory, reserve-max vs paged",
        description="Capacity arithmetic for a model and a memory budget (assets/reference_figures.md R5). "
                    "Memory is in GiB (2**30 bytes); byte figures are binary (KiB, MiB, GiB).")
    q.add_argument("--model", default=None, choices=[*sorted(acc.PRESETS), *CONFIG_KEYS],
                   help="preset model (default 7b-fp16), or a model read from its published config.json "
                        f"(assets/model_configs: {', '.join(CONFIG_KEYS)}), which also prints its bytes per "
                        "token factor by factor and the alternatives (MHA/GQA/MLA, bf16/fp8, windowed or full)")
    q.add_argument("--kv-cache-dtype", default=None, choices=list(KV_CACHE_DTYPES),
                   help="for a model config: the KV cache's element type, as vLLM's kv_cache_dtype "
                        "(auto = the model's own, bf16; fp8 = 1 byte per element; default auto)")
    q.add_argument("--layers", type=count_arg, default=None, help=f"custom model: layers ({range_help('layers')})")
    q.add_argument("--kv-heads", type=count_arg, default=None,
                   help=f"custom model: K/V heads ({range_help('kv_heads')})")
    q.add_argument("--head-dim", type=count_arg, default=None,
                   help=f"custom model: head dimension ({range_help('head_dim')})")
    q.add_argument("--bytes-per-element", type=count_arg, default=None,
                   help=f"custom model: bytes per element (default 2 = fp16/bf16; {range_help('bytes_per_element')})")
    q.add_argument("--free-gib", type=real_arg, required=True,
                   help=f"free KV memory in GiB ({range_help('free_gib')})")
    q.add_argument("--max-context", type=count_arg, required=True,
                   help=f"tokens reserved per sequence under reserve-max ({range_help('max_context')})")
    q.add_argument("--mean-tokens", type=real_arg, default=None,
                   help=f"mean tokens actually used per sequence ({range_help('mean_tokens')}); give this or --lengths")
    q.add_argument("--lengths", default=None,
                   help="instead of --mean-tokens: actual lengths, e.g. 512,37,1900,128,4")
    q.add_argument("--block-size", type=count_arg, default=_C["block_size"],
                   help=f"slots per block (default 16; {range_help('block_size')})")
    q.add_argument("--acceptance-rate", type=real_arg, default=None, metavar="A",
                   help="also print what speculative decoding costs: for k = 0..8 draft tokens a step, the k "
                        "lookahead slots' blocks per sequence, the sequences that fit, and the tokens a step "
                        f"yields when {ACCEPTANCE_WORDS} (the Capacity page's slider; "
                        f"{range_help('acceptance_rate')})")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=run_capacity)
