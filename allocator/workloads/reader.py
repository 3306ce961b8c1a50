"""The one reader layer every input file goes through: bytes read with a bound, names shown safely,
JSON and JSON Lines parsed with the same guards.

Every reader of a user's or a shipped file (:mod:`allocator.workloads.trace` for CSV traces,
:mod:`allocator.workloads.mooncake` for Mooncake JSONL, :mod:`allocator.workloads.vllm_run` for a
measured run's ``meta.json``, ``requests.jsonl`` and ``timeseries.csv``) uses these, so a kind of
damage refused in one file is refused, in the same words, in all of them:

* :func:`read_bytes`: a path, bytes or a file object, refused past a byte limit before it is read
  whole; a path that is a directory, a pipe or a device is refused before it is opened.
* :func:`file_label`: how a message names a file -- relative to the project when it lies inside it,
  else by its base name; never a server's absolute path.
* :func:`parse_json`: one JSON text (a line of a JSONL file, a ``meta.json``) with the guards the
  Mooncake reader had alone: a 5,000-digit number becomes a
  :class:`allocator.common.validate.LongNumber` (Python refuses to convert over 4,300 digits), which
  every check refuses as too long, nesting deeper than :data:`MAX_JSON_DEPTH` is refused before the
  parser recurses, and every refusal is a plain sentence, never the ``json`` module's own words.
* :func:`json_lines`: a JSONL text split at ``\\n`` only (``str.splitlines`` also splits at U+2028,
  U+0085 and other characters a JSON string may hold raw).
* :func:`shown` / :func:`cut`: a value or a text as a message quotes it, cut short;
  :func:`json_shown`: a value read from JSON, in JSON's spelling (``true``, not ``True``).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import zlib
import re
import stat

from allocator.common.errors import FieldError
from allocator.common.limits import MB
from allocator.common.paths import PROJECT
from allocator.common.validate import LongNumber

#: Deepest nesting of lists and objects read in one JSON text (every format here is flat or one level).
MAX_JSON_DEPTH = 32
#: Longest JSON integer read as a number (digits); longer ones become ``LongNumber`` (refused as too long).
MAX_INT_DIGITS = 30
#: Longest JSON fraction or exponent number read as a float (characters).
MAX_FLOAT_CHARS = 400


def shown(value, limit: int = 40) -> str:
    """A cell's or field's value as a message quotes it: ``repr``, cut to ``limit`` characters (a
    3 MB cell is not echoed back). Returns the text."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def cut(text: str, limit: int = 40) -> str:
    """Plain ``text`` cut to ``limit`` characters, the last being "…" when it was longer (a header
    name or a list echoed in a message)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def file_label(path, *, as_typed: bool = False) -> str:
    """How a message or an export names the file at ``path``: relative to the project when it lies
    inside it (``assets/vllm_runs/run``), else its base name (``rows.csv``) -- never the absolute
    path, which may show a home directory or a server's layout, in a file that others read.

    With ``as_typed`` (the errors of a file the command line was given: only its own user reads
    them, and ``missing.csv`` does not say which of two folders was meant), a path outside the
    project is named as it was typed (``../data/rows.csv``, ``/tmp/run/rows.csv``). The pages
    never read a path typed by a user (an upload arrives as bytes; shipped files lie inside the
    project). ``""`` for an empty name."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if not path:
        return ""
    full = os.path.abspath(path)
    if full == PROJECT:
        return "."
    if full.startswith(PROJECT + os.sep):
        return os.path.relpath(full, PROJECT).replace(os.sep, "/")
    if as_typed:
        return path
    return os.path.basename(os.path.normpath(full)) or full


def size_words(nbytes: int) -> str:
    """``nbytes`` in MB (1,000,000 bytes, the unit of every limit's message,
    ``allocator.common.limits.MB``): ``size_words(5_200_028) == "5.2 MB"``."""
    return f"{nbytes / MB:.1f} MB"


def limit_words(max_bytes: int) -> str:
    """``"the limit is 5 MB (5,000,000 bytes)"``, or ``"the limit is 512 bytes"`` below one MB."""
    if max_bytes >= MB:
        return f"the limit is {max_bytes / MB:g} MB ({max_bytes:,} bytes)"
    return f"the limit is {max_bytes:,} bytes"


def _whole_file_error(field: str, problem: str) -> FieldError:
    return FieldError(field, problem, subject="")


def read_bytes(source, max_bytes: int, *, field: str = "trace", what: str = "trace file") -> bytes:
    """The file's bytes (a path, bytes, or a binary/text file object), refused past ``max_bytes``.

    A path is checked before it is opened: its name must be UTF-8 (it is echoed in outputs), it
    must exist, be a regular file (not a directory, a pipe or a device, which could be read
    forever) and be readable. Messages name the file by :func:`file_label`.

    Args:
        source: a path (str or os.PathLike), bytes, or a file object.
        max_bytes: the largest file accepted (bytes).
        field: the FieldError's field (``"trace"``, ``"requests.jsonl"``).
        what: what the file is, for the messages (``"trace file"``).

    Returns:
        The bytes, at most ``max_bytes`` of them.

    Raises:
        FieldError (``field``): a name that is not UTF-8, a directory or other non-file, an
            unreadable file, or one larger than ``max_bytes``.
        FileNotFoundError: the path does not exist (its message names the file by :func:`file_label`).
    """
    limit = limit_words(max_bytes)
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise _whole_file_error(field, f"the file name {shown(file_label(path, as_typed=True))} is not UTF-8 text; "
                                           "rename the file") from None
        if "\x00" in path or not path:
            raise _whole_file_error(field, f"{shown(path)} is not a file name")
        name = file_label(path, as_typed=True)       # an error only the one who typed it reads
        if os.path.isdir(path):
            raise _whole_file_error(field, f"{name} is a directory, not a {what}")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such {what}: {name}")
        try:
            info = os.stat(path)
        except OSError as exc:
            raise _whole_file_error(field, f"{name} cannot be read: {exc.strerror or 'the system refused it'}") from None
        if not stat.S_ISREG(info.st_mode):
            raise _whole_file_error(field, f"{name} is not a regular file (a pipe or a device?); give a file")
        if info.st_size > max_bytes:
            raise _whole_file_error(field, f"{name} is {size_words(info.st_size)}; {limit}")
        try:
            with open(path, "rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise _whole_file_error(field, f"{name} cannot be read: {exc.strerror or 'the system refused it'}") from None
    else:
        data = source.read(max_bytes + 1)
        data = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
    if len(data) > max_bytes:
        raise _whole_file_error(field, f"the file is {size_words(len(data))}; {limit}")
    return data


def _parse_int(text: str):
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else LongNumber(text, MAX_INT_DIGITS)


def _parse_float(text: str):
    return float(text) if len(text) <= MAX_FLOAT_CHARS else LongNumber(text, MAX_FLOAT_CHARS, "characters")


class JsonStr(str):
    """A string read from JSON: a str in every way, but its ``repr`` is JSON's spelling (``"8"``, not
    ``'8'``), so any check that echoes it (``allocator.common.validate.in_range``) quotes it as the
    file has it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return json.dumps(str(self), ensure_ascii=False)

    def __reduce__(self):                   # a plain str across pickling (streamlit's caches)
        return str, (str(self),)


def _json_object(pairs: list) -> dict:
    """A JSON object with its string values as :class:`JsonStr` (keys stay plain)."""
    return {key: JsonStr(value) if isinstance(value, str) else value for key, value in pairs}


def json_shown(value, limit: int = 40) -> str:
    """A value read from JSON as a message quotes it: in JSON's spelling (``true``, ``null``,
    ``"text"``, ``[1, 2]``; ``json.dumps``; an object's string values are :class:`JsonStr`, whose
    ``repr`` is the same), a too-long number as its length (``a 5,001-digit
    value``), cut to ``limit`` characters. Returns the text."""
    if isinstance(value, LongNumber):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=True)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


_BRACKETS = re.compile(r'[\[\]{}"\\]')


def _depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in a JSON text, outside strings (a bound checked
    before the parser recurses; one pass, no recursion)."""
    deepest = depth = 0
    in_string, skip = False, -1
    for m in _BRACKETS.finditer(text):
        pos, ch = m.start(), m.group()
        if pos == skip:                            # the character after a backslash
            continue
        if in_string:
            if ch == "\\":
                skip = pos + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


#: The json module's refusals, in plain words (its message is never shown).
_JSON_PROBLEMS = (
    ("Expecting value", "a value is missing or is not JSON"),
    ("Expecting property name", "an object key is missing or not in double quotes"),
    ("Expecting ':' delimiter", "a ':' is missing after an object key"),
    ("Expecting ',' delimiter", "a ',' is missing between two items"),
    ("Unterminated string", "a string is not closed"),
    ("Invalid control character", "a string holds a raw control character (a tab or a line break)"),
    ("Invalid \\escape", "a string holds an unknown backslash escape"),
    ("Invalid \\uXXXX escape", "a string holds a bad \\u escape"),
    ("Extra data", "there is more after the first JSON value"),
)


def _json_problem(msg: str) -> str:
    for start, words in _JSON_PROBLEMS:
        if msg.startswith(start):
            return words
    return "it is not valid JSON"


def parse_json(text: str, where: str, *, field: str = "trace", index: int | None = None):
    """One JSON value from ``text``, with every refusal a plain sentence about ``where``.

    Integers longer than :data:`MAX_INT_DIGITS` digits and other numbers longer than
    :data:`MAX_FLOAT_CHARS` characters come back as :class:`~allocator.common.validate.LongNumber`
    (every check refuses it as too long, naming the field); ``NaN`` and ``Infinity`` come back as
    floats (the caller refuses them).

    Args:
        text: the JSON text (one line of a JSONL file, or a whole ``meta.json``).
        where: how the message names it (``"line 3"``, ``"meta.json"``).
        field, index: the FieldError's field and index (the 0-based line).

    Returns:
        The parsed value (dict, list, str, int, float, bool, None or LongNumber).

    Raises:
        FieldError: ``"<where> is not valid JSON: <plain reason> (column <c>)"``, or nesting deeper
            than :data:`MAX_JSON_DEPTH`.
    """
    if _depth(text) > MAX_JSON_DEPTH:
        raise FieldError(field, f"{where} nests lists or objects too deeply to read (more than {MAX_JSON_DEPTH} levels)",
                         index=index, subject="")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, object_pairs_hook=_json_object)
    except json.JSONDecodeError as exc:
        at = f"line {exc.lineno}, column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        raise FieldError(field, f"{where} is not valid JSON: {_json_problem(exc.msg)} ({at})",
                         index=index, subject="") from None
    except RecursionError:
        raise FieldError(field, f"{where} nests lists or objects too deeply to read", index=index, subject="") from None
    except ValueError:                             # any other refusal of the JSON reader
        raise FieldError(field, f"{where} cannot be read as JSON", index=index, subject="") from None


def json_lines(text: str):
    """``(1-based line number, line)`` of a JSONL text split at ``\\n`` only, a trailing ``\\r``
    dropped (a CR LF file reads as a LF one); a generator."""
    for n, raw in enumerate(text.split("\n"), start=1):
        yield n, raw[:-1] if raw.endswith("\r") else raw


def decode_utf8(data: bytes, field: str = "trace", name: str = "the file") -> str:
    """``data`` as text: UTF-8, with or without a byte-order mark.

    Raises:
        FieldError (``field``): the bytes are not UTF-8, naming the first bad position.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _whole_file_error(field, f"{name} is not UTF-8 text (bad byte at position {exc.start})") from None


def gunzip(data: bytes, max_bytes: int, field: str = "trace") -> bytes:
    """``data`` uncompressed when it is gzip (by its magic bytes), else ``data`` unchanged; at most
    ``max_bytes`` are uncompressed, so a small file that expands to gigabytes is refused early.

    Raises:
        FieldError (``field``): a truncated or damaged gzip stream, or one that expands past ``max_bytes``.
    """
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            out = fh.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error):
        raise _whole_file_error(field, "the file is not a readable gzip file (truncated or damaged)") from None
    if len(out) > max_bytes:
        raise _whole_file_error(field, f"the uncompressed file is over {max_bytes / MB:g} MB")
    return out
