"""SQL audits over the warehouse's Delta tables.

The tables are registered as external tables of a catalog database `offsets_lake` (each over
its path, WAREHOUSE/<table>), so SQL names them directly and Delta time travel stays
available (`SELECT ... FROM group_offsets TIMESTAMP AS OF '...'`, or by path:
delta.`WAREHOUSE/group_offsets` VERSION AS OF 3).

Canned queries are the files sql/audits/<name>.sql. Each starts with a comment header:

    -- description: one line
    -- param NAME TYPE [= DEFAULT]: what it is
    -- (free notes)

TYPE is string, int, timestamp or duration; DEFAULT is a literal, `null` (the parameter is
optional and bound as NULL) or, for timestamps, `now`. A parameter without a default is
required. Values are bound with Spark's named parameter markers (`:name`), never pasted
into the SQL text."""

from __future__ import annotations

import atexit
import base64
import csv
import datetime as dt
import decimal
import functools
import io
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field

from lib import storage
from lib.cli import parse_time_ms
from schemas.records import OFFSET_COMMIT_TYPES, RecordType

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SQL_DIR = os.path.join(REPO_ROOT, "sql", "audits")
DATABASE = "offsets_lake"
TYPES = ("string", "int", "timestamp", "duration")
FORMATS = ("table", "json", "csv")
# Delta's SQL parser (4.4) drops Spark 4.1+'s parse-time parameter context
# (delta-io/delta#7640), which leaves every marker unbound. The legacy substitution binds
# them during analysis instead; parameters may then stand wherever a constant may.
PARAMETER_MODE = ("spark.sql.legacy.parameterSubstitution.constantsOnly", "true")


class AuditError(Exception):
    """Bad input: unknown query or parameter, bad value, missing warehouse, failing SQL."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None = None  # raw text: a literal, "null" or "now"
    required: bool = True
    doc: str = ""

    def describe(self) -> str:
        spec = f"{self.name} ({self.type})"
        if not self.required:
            spec += f" = {self.default}"
        return f"{spec}: {self.doc}" if self.doc else spec


@dataclass(frozen=True)
class Query:
    name: str
    description: str
    params: tuple[Param, ...]
    sql: str
    path: str
    notes: tuple[str, ...] = field(default=())

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


_PARAM_LINE = re.compile(
    r"^param\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<type>\w+)"
    r"(?:\s*=\s*(?P<default>[^:]*?))?\s*(?::\s*(?P<doc>.*))?$"
)


_CONSTANT = re.compile(r"\$\{(RecordType\.[A-Z_]+|OFFSET_COMMIT_TYPES)\}")


def _named_constants(text: str, path: str) -> str:
    """The queries name record types as schemas.records does (`${RecordType.GROUP_METADATA}`,
    `${OFFSET_COMMIT_TYPES}`): their numbers have one home."""

    def value(m: re.Match) -> str:
        name = m.group(1)
        if name == "OFFSET_COMMIT_TYPES":
            return ", ".join(str(int(t)) for t in OFFSET_COMMIT_TYPES)
        member = name.split(".", 1)[1]
        if member not in RecordType.__members__:
            raise AuditError(f"{path}: unknown record type {name}")
        return str(int(RecordType[member]))

    return _CONSTANT.sub(value, text)


def parse_query(path: str) -> Query:
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
        text = _named_constants(f.read(), path)
    description, params, notes = None, [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            break
        body = stripped[2:].strip()
        if body.startswith("description:"):
            description = body[len("description:") :].strip()
        elif body.startswith("param "):
            m = _PARAM_LINE.match(body)
            if not m or m["type"] not in TYPES:
                raise AuditError(f"{path}: bad parameter line: {stripped!r} (types: {', '.join(TYPES)})")
            default = m["default"].strip() if m["default"] is not None else None
            if default == "now" and m["type"] != "timestamp":
                raise AuditError(f"{path}: only a timestamp can default to now: {stripped!r}")
            params.append(Param(m["name"], m["type"], default, default is None, (m["doc"] or "").strip()))
        elif body:
            notes.append(body)
    if not description:
        raise AuditError(f"{path}: the header has no '-- description:' line")
    markers = set(re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", _strip_comments_and_strings(text)))
    declared = {p.name for p in params}
    if markers != declared:
        raise AuditError(f"{path}: parameter markers {sorted(markers)} differ from the header's {sorted(declared)}")
    return Query(name, description, tuple(params), text, path, tuple(notes))


def _strip_comments_and_strings(sql: str) -> str:
    return re.sub(r"--[^\n]*|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`", " ", sql)


def load_queries(sql_dir: str = SQL_DIR) -> dict[str, Query]:
    out = {}
    for entry in sorted(os.listdir(sql_dir)):
        if entry.endswith(".sql"):
            q = parse_query(os.path.join(sql_dir, entry))
            out[q.name] = q
    return out


def get_query(name: str, queries: dict[str, Query] | None = None) -> Query:
    queries = load_queries() if queries is None else queries
    if name not in queries:
        raise AuditError(f"unknown query {name!r}; known: {', '.join(sorted(queries))}")
    return queries[name]


def list_text(queries: dict[str, Query]) -> str:
    lines = []
    for q in queries.values():
        lines.append(f"{q.name}: {q.description}")
        for p in q.params:
            lines.append(f"    --param {p.describe()}")
    return "\n".join(lines)


# --- parameter values ---------------------------------------------------------------------
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|w|d|h|m|s)", re.I)
_ISO_DURATION = re.compile(
    r"^P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$",
    re.I,
)
_UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def parse_duration(text: str) -> dt.timedelta:
    """'7d', '36h', '1d12h30m', '90s', '500ms', '2w' or ISO-8601 'P7D' / 'PT36H' / 'P1DT12H'."""
    t = text.strip()
    m = _ISO_DURATION.match(t)
    if m and t.upper() not in ("P", "PT") and not t.upper().endswith("T"):
        w, d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
        return dt.timedelta(weeks=w, days=d, hours=h, minutes=mi, seconds=s)
    pos, seconds = 0, 0.0
    compact = t.replace(" ", "")
    for part in _DURATION_PART.finditer(compact):
        if part.start() != pos:
            break
        seconds += float(part.group(1)) * _UNIT_SECONDS[part.group(2).lower()]
        pos = part.end()
    if pos != len(compact) or not compact:
        raise ValueError(f"not a duration: {text!r} (e.g. 7d, 36h, 1d12h, P7D, PT36H)")
    return dt.timedelta(seconds=seconds)


def coerce(param: Param, raw: str | None, now_ms: int | None = None):
    """The Python value bound for `param` given its command-line text (None: the default)."""
    if raw is None:
        if param.required:
            raise AuditError(f"missing parameter {param.name!r} ({param.type})")
        raw = param.default
        if raw == "null":
            return None
        if raw == "now":
            ms = now_ms if now_ms is not None else parse_time_ms(None)
            return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    if raw is None:  # an optional parameter without a default binds null
        return None
    try:
        if param.type == "string":
            return raw
        if param.type == "int":
            value = int(raw.strip())
            if not -(2**31) <= value < 2**31:
                raise ValueError("out of the int range")
            return value
        if param.type == "timestamp":
            return dt.datetime.fromtimestamp(parse_time_ms(raw) / 1000, dt.UTC)
        if param.type == "duration":
            return parse_duration(raw)
    except ValueError as e:
        raise AuditError(f"parameter {param.name!r} ({param.type}): {e}") from None
    raise AuditError(f"parameter {param.name!r}: unknown type {param.type!r}")


def parse_param_args(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise AuditError(f"--param wants NAME=VALUE, got {pair!r}")
        if name.strip() in out:
            raise AuditError(f"parameter {name.strip()!r} given twice")
        out[name.strip()] = value
    return out


def bind(query: Query, raw: dict[str, str], now_ms: int | None = None) -> dict:
    """Validated, typed arguments for spark.sql(query.sql, args=...)."""
    unknown = sorted(set(raw) - {p.name for p in query.params})
    if unknown:
        known = ", ".join(p.name for p in query.params) or "none"
        raise AuditError(f"unknown parameter(s) {', '.join(map(repr, unknown))} for {query.name} (parameters: {known})")
    return {p.name: coerce(p, raw.get(p.name), now_ms) for p in query.params}


# --- values as literals (Spark Connect) ---------------------------------------------------
SQL_TYPES = {"string": "STRING", "int": "INT", "timestamp": "TIMESTAMP", "duration": "INTERVAL DAY TO SECOND"}


@functools.cache
def sql_tokens() -> re.Pattern:
    """Comments, quoted text, parameter markers (group 1) and table names after FROM / JOIN
    (groups 2, 3), so that only the latter two are rewritten."""
    from schemas.tables import ALL_TABLES

    names = "|".join(sorted((t.name for t in ALL_TABLES), key=len, reverse=True))
    return re.compile(
        r"--[^\n]*|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`|(?<![:\w]):([A-Za-z_]\w*)"
        rf"|\b((?i:FROM|JOIN)\s+)({names})\b"
    )


def sql_literal(type_: str, value) -> str:
    """A bound value (audit_queries.coerce's) as a SQL literal of its type."""
    if value is None:
        return f"CAST(NULL AS {SQL_TYPES[type_]})"
    if type_ == "string":
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if type_ == "int":
        return str(int(value))
    if type_ == "timestamp":
        micros = (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
        return f"timestamp_micros({micros})"
    micros = value // dt.timedelta(microseconds=1)
    return f"make_dt_interval(0, 0, 0, {micros // 1_000_000}.{micros % 1_000_000:06d})"


def inline_query(query: Query, bound: dict) -> str:
    """The query's SQL with each marker replaced by its bound value as a typed literal. For
    Spark Connect, where a parameterised statement loses its arguments in Delta's SQL parser
    (delta-io/delta#7640, as in audit_queries.PARAMETER_MODE, with no legacy mode to fall
    back on); the values are typed, never text from the user pasted into SQL."""
    return inline_sql(query.sql, {p.name: (p.type, bound[p.name]) for p in query.params})


def inline_sql(text: str, values: dict[str, tuple[str, object]]) -> str:
    """`text` with each marker `:name` replaced by the literal of values[name] = (type, value)."""

    def token(m: re.Match) -> str:
        if m.group(1) is None:
            return m.group(0)
        if m.group(1) not in values:
            raise AuditError(f"no value for the parameter marker :{m.group(1)}")
        return sql_literal(*values[m.group(1)])

    return sql_tokens().sub(token, text)


# --- the session's catalog ----------------------------------------------------------------
def warehouse_tables(warehouse: str) -> list[str]:
    """The Delta tables present in the warehouse folder; AuditError when there are none."""
    if not warehouse or not storage.isdir(warehouse):
        raise AuditError(
            f"warehouse {warehouse!r} does not exist (a folder of Delta tables written by jobs.replay_offsets)"
        )
    from schemas.tables import ALL_TABLES

    present = [t.name for t in ALL_TABLES if storage.isdir(storage.join(warehouse, t.name, "_delta_log"))]
    if not present:
        raise AuditError(
            f"warehouse {warehouse!r} holds none of the Delta tables ({', '.join(t.name for t in ALL_TABLES)})"
        )
    return present


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def open_catalog(spark, warehouse: str, use: bool = True) -> list[str]:
    """Register the warehouse's tables in database `offsets_lake` (replacing an earlier
    registration in this session; external tables, so dropping one never touches its files)
    and make it the current database. Returns the registered table names."""
    names = warehouse_tables(warehouse)
    spark.conf.set(*PARAMETER_MODE)
    if not spark.catalog.databaseExists(DATABASE):
        # the database's own folder holds nothing; keep it out of the warehouse and the cwd
        location = tempfile.mkdtemp(prefix="offsets-lake-catalog-")
        atexit.register(shutil.rmtree, location, True)
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE} LOCATION {_quote(location)}")
    for t in spark.catalog.listTables(DATABASE):
        if t.tableType == "EXTERNAL" or t.isTemporary:
            spark.sql(f"DROP TABLE IF EXISTS {DATABASE}.`{t.name}`")
    for name in names:
        path = storage.absolute(storage.join(warehouse, name))
        spark.sql(f"CREATE TABLE {DATABASE}.`{name}` USING delta LOCATION {_quote(path)}")
    if use:
        spark.catalog.setCurrentDatabase(DATABASE)
    from lib.spark.assignment import register_what_if
    from lib.spark.audit_views import register_views

    register_what_if(spark)  # assignment_audit's what_if, for the rows a query shows
    register_views(spark, DATABASE, names)  # the rules the queries share with the report
    return names


def run_query(spark, query: Query, args: dict):
    """The query's DataFrame; Spark's errors become AuditError."""
    return sql(spark, query.sql, args)


def sql(spark, text: str, args: dict | None = None):
    from pyspark.errors import PySparkException

    spark.conf.set(*PARAMETER_MODE)
    try:
        return spark.sql(text, args=args or None)
    except PySparkException as e:
        raise AuditError(spark_message(e)) from None


def collect(df) -> tuple[list[str], list[dict]]:
    """Column names and rows as dicts; timestamps as timezone-aware UTC datetimes."""
    from pyspark.errors import PySparkException

    try:
        rows = df.collect()
    except PySparkException as e:
        raise AuditError(spark_message(e)) from None
    return list(df.columns), [_utc(r.asDict(recursive=True)) for r in rows]


def _utc(value):
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)  # PySpark hands naive local-time datetimes over
    if isinstance(value, dict):
        return {k: _utc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_utc(v) for v in value]
    return value


def spark_message(e: Exception) -> str:
    """The first lines of a Spark error, without the plan and the JVM stack."""
    lines = []
    for line in str(e).strip().splitlines():
        if line.startswith(("== ", "JVM stacktrace", "\tat ", "'", "+-", ":- ", " ")):
            break
        lines.append(line)
    return "\n".join(lines[:4]).strip().rstrip(";") or type(e).__name__


# --- output -------------------------------------------------------------------------------
def plain(value):
    """A JSON-ready value: timestamps ISO-8601 UTC, durations ISO-8601, bytes base64."""
    if isinstance(value, dt.datetime):
        v = value.astimezone(dt.UTC)  # PySpark hands naive local-time datetimes over
        text = v.strftime("%Y-%m-%dT%H:%M:%S")
        if v.microsecond:
            text += f".{v.microsecond // 1000:03d}" if v.microsecond % 1000 == 0 else f".{v.microsecond:06d}"
        return text + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return iso_duration(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def iso_duration(td: dt.timedelta) -> str:
    sign = "-" if td < dt.timedelta(0) else ""
    td = abs(td)
    days, rest = td.days, td.seconds
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    secs = f"{s}.{td.microseconds:06d}".rstrip("0").rstrip(".") if td.microseconds else str(s)
    time = "".join(f"{v}{u}" for v, u in ((h, "H"), (m, "M")) if v) + (f"{secs}S" if secs != "0" else "")
    out = f"{sign}P{days}D" if days else f"{sign}P"
    return out + (f"T{time}" if time else ("" if days else "T0S"))


def _cell(value) -> str:
    v = plain(value)
    if v is None:
        return "NULL"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def format_rows(columns: list[str], rows: list[dict], fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps([plain(r) for r in rows], ensure_ascii=False, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if r[c] is None else _cell(r[c]) for c in columns])
        return out.getvalue().rstrip("\n")
    if fmt != "table":
        raise AuditError(f"unknown format {fmt!r} ({', '.join(FORMATS)})")
    cells = [[_cell(r[c]) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    lines = [line(columns), "-+-".join("-" * w for w in widths)]
    lines += [line(row) for row in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


# --- interactive prompt -------------------------------------------------------------------
def split_statements(buffer: str) -> tuple[list[str], str]:
    """Complete `;`-terminated statements in `buffer` (quotes and -- comments respected) and
    the unfinished rest."""
    statements, start, i, quote = [], 0, 0, None
    while i < len(buffer):
        ch = buffer[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif buffer.startswith("--", i):
            nl = buffer.find("\n", i)
            i = len(buffer) if nl < 0 else nl
            continue
        elif ch == ";":
            stmt = buffer[start:i].strip()
            if stmt:
                statements.append(stmt)
            start = i + 1
        i += 1
    return statements, buffer[start:]


HELP = r"""Statements end with ';'. Tables: offsets_log, group_offsets, ... (\d lists them).
  \q            quit                       \d   tables of the warehouse
  \l            canned queries             \h   this help
  \run NAME [param=value ...]   run a canned query"""


def interactive(
    spark,
    warehouse: str,
    stdin,
    stdout,
    queries: dict[str, Query] | None = None,
    fmt: str = "table",
    inline: bool = False,
) -> int:
    """A SQL prompt over the registered tables. Errors are printed and the prompt goes on.
    `inline`: bind a canned query's values as literals (a Spark Connect session)."""
    tty = stdin.isatty()
    if tty:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    queries = load_queries() if queries is None else queries

    def say(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    def read(prompt: str) -> str | None:
        if tty:
            try:
                return input(prompt)
            except EOFError:
                return None
        line = stdin.readline()
        return None if line == "" else line.rstrip("\n")

    def execute(text: str, args: dict | None = None) -> None:
        try:
            df = sql(spark, text, args)
            if df.columns:
                columns, rows = collect(df)
                say(format_rows(columns, rows, fmt))
            else:
                df.collect()
                say("OK")
        except AuditError as e:
            say(f"error: {e}")

    if tty:
        say(f"offsets-lake SQL over {warehouse} (database {DATABASE}); \\h for help, \\q to quit")
    buffer = ""
    while True:
        line = read(f"{DATABASE}> " if not buffer.strip() else "        -> ")
        if line is None:
            break
        cmd = line.strip()
        if not buffer.strip() and cmd.startswith("\\"):
            word, _, rest = cmd.partition(" ")
            if word == "\\q":
                break
            if word == "\\h":
                say(HELP)
            elif word == "\\l":
                say(list_text(queries))
            elif word == "\\d":
                execute(f"SHOW TABLES IN {DATABASE}")
            elif word == "\\run":
                try:
                    name, *pairs = rest.split()
                    q = get_query(name, queries)
                    bound = bind(q, parse_param_args(pairs))
                    if inline:
                        execute(inline_query(q, bound))
                    else:
                        execute(q.sql, bound)
                except ValueError:
                    say("error: \\run NAME [param=value ...]")
                except AuditError as e:
                    say(f"error: {e}")
            else:
                say(f"error: unknown command {word} (\\h for help)")
            continue
        buffer += line + "\n"
        statements, buffer = split_statements(buffer)
        for stmt in statements:
            execute(stmt)
    return 0
