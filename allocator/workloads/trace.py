"""Real request traces: load, validate and replay them as workloads.

Two CSV schemas are accepted (read with pandas):

* Azure LLM inference trace 2023: ``TIMESTAMP, ContextTokens, GeneratedTokens``
  (TIMESTAMP as ``YYYY-MM-DD HH:MM:SS.fffffff``).
* Plain: ``prompt_tokens, output_tokens`` and optionally ``arrival_s`` (seconds from the start).

The shipped file is the whole conversation trace of the Azure LLM inference trace 2023 (19,366
requests over one hour; CC-BY 4.0): Patel et al., "Splitwise: Efficient generative LLM inference using phase
splitting", ISCA 2024. Data: Azure Public Dataset, AzureLLMInferenceDataset2023.
"""
from __future__ import annotations

import csv
import io
import os

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is imported where a CSV is read (it takes most of `import allocator`)
    import pandas as pd

from allocator.common.errors import FieldError
from allocator.common.limits import MAX_ROWS, MAX_TOKENS, MAX_UPLOAD_BYTES
from allocator.common.paths import ASSETS, PROJECT
from allocator.common.validate import real_number, whole_number
from allocator.workloads.reader import cut, read_bytes, shown
from allocator.workloads.requests import Workload, workload_from_lengths
from allocator.common.formats import plural

#: The shipped Azure conversation trace (all 19,366 rows).
AZURE_TRACE = os.path.join(ASSETS, "azure_llm_conv_2023.csv")
AZURE_ATTRIBUTION = (
    "Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, "
    "Ricardo Bianchini. \"Splitwise: Efficient generative LLM inference using phase splitting\", "
    "ISCA 2024. Data: Azure Public Dataset, AzureLLMInferenceDataset2023 (CC-BY 4.0)."
)
#: Largest file read (bytes): the upload limit, a bound that keeps a bad file from hanging the app
#: (rows and lengths: ``allocator.common.limits.MAX_ROWS``, ``MAX_TOKENS``).
MAX_BYTES = MAX_UPLOAD_BYTES
#: Latest arrival step a replay may produce: 2**53, below which steps are exact in a float.
MAX_ARRIVAL_STEP = 2 ** 53

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PLAIN_COLUMNS = ("prompt_tokens", "output_tokens")


def _cell_error(col: str, row: int, problem: str) -> FieldError:
    """A FieldError about one cell: field = the column, index = the 0-based data row; the message
    names it as a spreadsheet user reads it (``"row 2, column ContextTokens: ..."``, 1-based rows)."""
    return FieldError(col, f": {problem}", index=row, subject=f"row {row + 1}, column {col}")


def _decode(data: bytes) -> str:
    """The file's text: UTF-8, with or without a byte-order mark.

    Line ends CR LF and LF are read as they are; a file whose lines end in CR alone (Excel's "CSV
    (Macintosh)") is read with each CR as a line end.

    Raises:
        FieldError (``trace``): a gzip file, a zip archive or Excel workbook, UTF-16 or UTF-32 (by
            its byte-order mark or its NUL bytes), or any other bytes that are not UTF-8 (Latin-1,
            Windows-1252), with the first bad position.
    """
    if data.startswith(b"\x1f\x8b"):
        raise _file_error("the file is gzip-compressed, not CSV text: decompress it (gunzip) and give the CSV inside")
    if data.startswith(b"PK\x03\x04"):
        raise _file_error("the file is a zip archive or an Excel workbook (.xlsx), not CSV text: save it as CSV UTF-8")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise _file_error("the file is UTF-16 text, not UTF-8; save it as CSV UTF-8")
    if b"\x00" in data:
        raise _file_error("the file holds NUL bytes: it is not UTF-8 text (UTF-16 without a byte-order "
                          "mark?); save it as CSV UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _file_error(f"the file is not UTF-8 text (bad byte at position {exc.start}); "
                          "save it as CSV UTF-8") from None
    if "\r" in text and "\n" not in text:        # CR-only line ends (Excel's "CSV (Macintosh)"): read as lines
        text = text.replace("\r", "\n")
    return text


#: Most columns a trace CSV may have (the schemas use 2 or 3; extra columns are allowed and ignored).
#: Checked row by row before pandas sees the file: a 3.8 MB row of 560,000 empty columns took
#: pandas 114 s and 1.3 GB (issue 42).
MAX_COLUMNS = 256
#: Longest cell read (characters): a token count, a number of seconds or a timestamp is far shorter.
MAX_CELL_CHARS = 1000


def _csv_problem(exc: csv.Error, line: int) -> str:
    """The csv module's refusal of a row, in plain words (its own message is never shown)."""
    text = str(exc)
    if "new-line character" in text:
        return (f"line {line} has a line break (CR) inside a cell that is not in quotes: remove it, or "
                "quote the cell")
    if "field larger than field limit" in text:
        return f"line {line} has a cell longer than {MAX_CELL_CHARS:,} characters"
    if "EOF" in text or "quote" in text:
        return f"line {line} has a quote that is never closed"
    return f"line {line} is not a readable CSV row"


def check_structure(text: str, *, expected: str = "prompt_tokens, output_tokens[, arrival_s] or TIMESTAMP, "
                                                  "ContextTokens, GeneratedTokens") -> None:
    """The file's shape before its values: one header of distinct names, every row as wide as it,
    no more than :data:`MAX_COLUMNS` columns and no cell over :data:`MAX_CELL_CHARS` characters.
    Each row is checked as it is read, so a row of half a million columns is refused at once.
    ``expected``: the columns the format wants, as a message names them.

    Raises:
        FieldError: the first row (counted as a spreadsheet shows data rows, from 1) with more or
            fewer fields than the header, too many columns, a cell too long, or one the csv reader
            refuses (a stray quote, a CR in an unquoted cell; field ``trace``), or a column named
            twice (that column).
    """
    rows = csv.reader(io.StringIO(text, newline=""))

    def checked(row, where):
        if len(row) > MAX_COLUMNS:
            raise _file_error(f"{where} has {len(row):,} columns; at most {MAX_COLUMNS} are accepted ({expected})")
        if row and max(map(len, row)) > MAX_CELL_CHARS:
            raise _file_error(f"{where} has a cell longer than {MAX_CELL_CHARS:,} characters")
        return row
    old_limit = csv.field_size_limit()
    try:
        csv.field_size_limit(MAX_CELL_CHARS + 1)
        header = next(rows, None)
        while header is not None and len(header) <= 1 and not "".join(header).strip():
            header = next(rows, None)            # blank lines before the header (pandas skips them too)
        if header is None:
            return                               # empty: pandas' check below says so
        names = [h.strip() for h in checked(header, "the header")]
        seen = set()
        for name in names:
            if name and name in seen:
                raise FieldError(name, " appears twice in the header: each column must be named once",
                                 subject=f"column {cut(name)}")
            seen.add(name)
        for i, row in enumerate(rows):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue                         # a blank line
            checked(row, f"row {i + 1}")
            if len(row) != len(names):
                raise FieldError("trace", f"row {i + 1:,} has {plural(len(row), 'field')} but the header has {len(names):,} "
                                 f"({cut(', '.join(names), 80)}): a field is missing or extra",
                                 index=i, subject="")
    except csv.Error as exc:                     # a cell past the size limit, a stray quote, a CR
        raise _file_error(f"the file is not a readable CSV: {_csv_problem(exc, rows.line_num)}") from None
    finally:
        csv.field_size_limit(old_limit)


def _file_error(problem: str) -> FieldError:
    """A FieldError about the trace file as a whole (field ``trace``)."""
    return FieldError("trace", problem, subject="")


def _number_text(value: float, raw) -> str:
    """A cell's number as a message shows it: ``5`` for a value a spreadsheet shows as an integer,
    else the text as written (``'1e300'``, cut to 40 characters)."""
    return str(int(value)) if abs(value) < 1e18 else shown(raw)


def _numeric_cells(df: pd.DataFrame, col: str, what: str) -> np.ndarray:
    """Column ``col`` as float64, every cell a finite number, else FieldError naming the first bad
    row and column: an empty cell, text that is not a number, or one that is not finite (``inf``,
    ``1e400``, ``NaN``) -- before any other check looks at the values."""
    import pandas as pd

    raw = df[col]
    num = pd.to_numeric(raw, errors="coerce")
    values = num.to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        cell = raw.iloc[i]
        if not isinstance(cell, str) or not cell.strip():
            raise _cell_error(col, i, f"the cell is empty: give {what}")
        if np.isnan(values[i]):
            raise _cell_error(col, i, f"{shown(cell)} is not a number: give {what}")
        raise _cell_error(col, i, f"{shown(cell)} is not a finite number: give {what}")
    return values


def _integer_column(df: pd.DataFrame, col: str, minimum: int) -> np.ndarray:
    """Column ``col`` as int64, or FieldError naming the first bad row (1-based data row) and column."""
    raw = df[col]
    values = _numeric_cells(df, col, "a whole number of tokens")
    frac = values != np.floor(values)
    if frac.any():
        i = int(np.flatnonzero(frac)[0])
        raise _cell_error(col, i, f"{shown(raw.iloc[i])} is not a whole number of tokens")
    low = values < minimum
    if low.any():
        i = int(np.flatnonzero(low)[0])
        raise _cell_error(col, i, f"{_number_text(values[i], raw.iloc[i])} is below the minimum {minimum}")
    high = values > MAX_TOKENS
    if high.any():
        i = int(np.flatnonzero(high)[0])
        raise _cell_error(col, i, f"{_number_text(values[i], raw.iloc[i])} tokens is larger than any pool "
                         f"could hold (limit {MAX_TOKENS})")
    return values.astype(np.int64)


def load_trace(source, *, max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES) -> pd.DataFrame:
    """Read and validate a trace CSV.

    Args:
        source: a path, a file-like object, or bytes.
        max_rows: most data rows accepted.
        max_bytes: largest file accepted (bytes; 5 MB by default, as the app's upload limit).

    Returns:
        DataFrame with int64 columns ``prompt_tokens``, ``output_tokens`` and float column
        ``arrival_s`` (seconds since the first request; 0 for every row when the file has none).

    The file's structure is checked before its values (one header of distinct names, every row
    as wide as it), and every numeric cell must be a finite number before any other check reads it.

    Raises:
        FieldError: a message naming the row and column (field = the column, index = the 0-based
            data row) or the problem with the whole file (field ``trace``):
            a path that is a directory, a device or unreadable, or whose name is not UTF-8; a file
            that is UTF-16 or otherwise not UTF-8; empty, header only, missing or duplicated
            columns, a row wider or narrower than the header; an empty cell, text, ``inf``,
            ``1e400`` or ``NaN`` where a number belongs; fractional, negative or huge values, zero
            output tokens; unparseable, mixed-zone, decreasing or duplicate timestamps (Azure
            schema); too many rows, a file larger than ``max_bytes``.
        FileNotFoundError: the path does not exist.
    """
    import pandas as pd

    data = read_bytes(source, max_bytes)
    text = _decode(data)
    check_structure(text)
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, skipinitialspace=True, index_col=False,
                         keep_default_na=False, na_values=[""])   # "NaN", "null" are text, not blanks
    except pd.errors.EmptyDataError:
        raise _file_error("the file is empty") from None
    except pd.errors.ParserError as exc:
        if "out of memory" in str(exc):           # pandas' C tokenizer: the machine, not the file
            raise MemoryError(str(exc)) from None
        raise _file_error("the file is not a readable CSV table") from None
    df.columns = [str(c).strip() for c in df.columns]
    if all(c in df.columns for c in AZURE_COLUMNS):
        schema, p_col, o_col = "azure", "ContextTokens", "GeneratedTokens"
    elif all(c in df.columns for c in PLAIN_COLUMNS):
        schema, p_col, o_col = "plain", "prompt_tokens", "output_tokens"
    else:
        raise _file_error(
            "the file is missing columns: expected TIMESTAMP, ContextTokens, GeneratedTokens (Azure schema) or "
            f"prompt_tokens, output_tokens[, arrival_s] (plain schema); found {cut(', '.join(map(str, df.columns)), 120) or 'none'}")
    if len(df) == 0:
        raise _file_error("the file has a header but no rows")
    if len(df) > max_rows:
        raise _file_error(f"the file has {plural(len(df), 'row')}; at most {max_rows:,} are accepted")
    prompts = _integer_column(df, p_col, 1)
    outputs = _integer_column(df, o_col, 1)
    if schema == "azure":
        try:
            ts = pd.to_datetime(df["TIMESTAMP"], errors="coerce", format="mixed")
        except (ValueError, TypeError):             # pandas refuses to mix time zones in one column
            raise FieldError("TIMESTAMP", ": the timestamps mix time zones (or zoned and unzoned times); "
                             "write every row in one time zone", subject="column TIMESTAMP") from None
        bad = ts.isna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise _cell_error("TIMESTAMP", i, f"{shown(df['TIMESTAMP'].iloc[i])} is not a timestamp")
        arrival = (ts - ts.iloc[0]).dt.total_seconds().to_numpy()
        dup = np.flatnonzero(np.diff(arrival) == 0)
        if len(dup):
            i = int(dup[0]) + 1
            raise _cell_error("TIMESTAMP", i, f"{shown(df['TIMESTAMP'].iloc[i])} repeats the "
                             f"timestamp of row {i} (each request needs its own arrival time)")
    elif "arrival_s" in df.columns:
        arrival = _numeric_cells(df, "arrival_s", "a number of seconds (0 or more)")
        bad = arrival < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _cell_error("arrival_s", i, f"{shown(df['arrival_s'].iloc[i])} is not a "
                             "non-negative number of seconds")
    else:
        arrival = np.zeros(len(df))
    back = np.flatnonzero(np.diff(arrival) < 0)
    if len(back):
        i = int(back[0]) + 1
        col = "TIMESTAMP" if schema == "azure" else "arrival_s"
        raise _cell_error(col, i, f"arrivals must not go back in time "
                         "(sort the file by arrival)")
    return pd.DataFrame({"prompt_tokens": prompts, "output_tokens": outputs,
                         "arrival_s": arrival - (arrival[0] if len(arrival) else 0.0)})


def trace_workload(df: pd.DataFrame, *, offset: int = 0, count: int = 40, steps_per_second: float = 20.0,
                   max_new_tokens: int = 1024, name: str = "azure-conv") -> Workload:
    """Replay ``count`` consecutive trace rows from ``offset`` as a workload.

    Arrival step = floor((arrival_s - arrival_s[offset]) x steps_per_second), so one step is
    1/steps_per_second seconds of wall time (a decode iteration of tens of milliseconds on a
    real GPU). Each request also keeps its exact ``arrival_s`` (seconds after row ``offset``)
    for runs on the seconds clock. Outputs longer than ``max_new_tokens`` are clipped to it (the server would stop
    them there) and the number clipped is reported in ``Workload.notes``.

    Raises:
        FieldError: ``offset`` outside the trace, ``count`` below 1, ``steps_per_second`` not a
            positive finite number.
    """
    n = len(df)
    offset = whole_number("offset", offset, 0, n - 1)
    count = whole_number("count", count, 1)
    steps_per_second = real_number("steps_per_second", steps_per_second, above=0)
    part = df.iloc[offset: offset + count]
    notes = []
    if len(part) < count:
        rows = "1 row remains" if len(part) == 1 else f"{len(part)} rows remain"
        notes.append(f"only {rows} after offset {offset}")
    t0 = float(part["arrival_s"].iloc[0])
    with np.errstate(over="ignore", invalid="ignore"):    # an overflow is caught just below, by name
        exact = (part["arrival_s"].to_numpy() - t0) * steps_per_second
    late = np.flatnonzero(~np.isfinite(exact) | (exact > MAX_ARRIVAL_STEP))
    if len(late):
        i = int(late[0])
        raise FieldError("arrival_s", f": {part['arrival_s'].iloc[i]:g} s after the first request is step "
                         f"{exact[i]:.3g} at {steps_per_second:g} steps per second, past the engine's "
                         f"clock ({MAX_ARRIVAL_STEP:,} steps); lower steps_per_second",
                         index=offset + i, subject=f"row {offset + i + 1}, column arrival_s")
    steps = np.floor(exact).astype(np.int64)
    outputs = part["output_tokens"].to_numpy()
    clipped = int((outputs > max_new_tokens).sum())
    if clipped:
        notes.append(f"{clipped} output{'' if clipped == 1 else 's'} longer than max_new_tokens={max_new_tokens} "
                     f"{'was' if clipped == 1 else 'were'} clipped to it")
    rows = zip(part["prompt_tokens"].to_numpy().tolist(),
               np.minimum(outputs, max_new_tokens).tolist(), steps.tolist(),
               (part["arrival_s"].to_numpy() - t0).tolist())
    # request ids are 1-based trace row numbers, so "r101" is the file's 101st data row
    return workload_from_lengths(name, rows, max_new_tokens, notes=notes, first_id=offset + 1)


_CACHE: dict = {}


class ShippedDataError(FieldError):
    """A data file the project ships under ``assets/`` is missing, unreadable or damaged (field
    ``shipped_data``; ``.path`` is the file relative to the project). The message names that file,
    never the server's absolute path, and says what to do; the pages that need the file show it
    and the rest of the app keeps working."""

    def __init__(self, path: str, problem: str):
        super().__init__("shipped_data", problem, subject="")
        self.path = path

    def __reduce__(self):
        return (ShippedDataError, (self.path, self.problem))


def project_path(path: str) -> str:
    """``path`` as a message names it: relative to the project when it lies inside it
    (``assets/azure_llm_conv_2023.csv``), else ``assets/`` plus its file name."""
    full = os.path.abspath(path)
    if full.startswith(PROJECT + os.sep):
        return os.path.relpath(full, PROJECT).replace(os.sep, "/")
    return "assets/" + os.path.basename(full)


def load_shipped(path: str, loader, what: str):
    """``loader(path)`` for a file the project ships, with every failure turned into one message.

    Args:
        path: the file (``AZURE_TRACE``, ``allocator.workloads.mooncake.MOONCAKE_TRACE``).
        loader: reads and validates it (``load_trace``, ``load_mooncake``).
        what: what the file feeds, for the message (``"the Azure conversation trace"``).

    Raises:
        ShippedDataError: the file is missing, not a readable file, or fails ``loader``'s checks
            (truncated, corrupt, not UTF-8, not gzip); the message names the file relative to the
            project and says how to restore it.
    """
    name = project_path(path)
    restore = (f"restore it from the project's repository (git checkout -- {name}) or copy it back from "
               "a fresh copy of the project")
    try:
        return loader(path)
    except FileNotFoundError:
        raise ShippedDataError(name, f"the shipped data file {name} ({what}) is missing: {restore}") from None
    except MemoryError:
        raise                                   # the machine ran out, the file is not damaged: the CLI says so
    except (ValueError, OSError, EOFError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        detail = detail.replace(os.path.abspath(path), name).replace(str(path), name).lstrip(": ")
        raise ShippedDataError(name, f"the shipped data file {name} ({what}) is damaged ({detail}): "
                                     f"{restore}") from None


def shipped_trace() -> pd.DataFrame:
    """The shipped Azure conversation trace, loaded once per process (see ``AZURE_ATTRIBUTION``).

    Raises:
        ShippedDataError: the file is missing or damaged (:func:`load_shipped`); not cached, so a
            restored file is read on the next call.
    """
    if "azure" not in _CACHE:
        _CACHE["azure"] = load_shipped(AZURE_TRACE, load_trace, "the Azure conversation trace")
    return _CACHE["azure"]
