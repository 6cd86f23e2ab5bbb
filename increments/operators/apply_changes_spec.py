"""What `writer.apply_changes(...)` declares (ApplyChangesSpec), checked as it is written.

Kept apart from the operator (operators/apply_changes.py) so that declaring a query, e.g. when a
Dagster code location loads its definitions, imports neither DuckDB nor Arrow."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..durations import parse_duration_ms

DEFAULT_TOMBSTONE_RETENTION = "2 days"
ALIASES = {"except_column_list": "except_columns", "column_list": "columns",
           "track_history_column_list": "track_history_columns",
           "track_history_except_column_list": "track_history_except_columns"}


@dataclass(frozen=True)
class ApplyChangesSpec:
    keys: tuple[str, ...]
    sequence_by: tuple[str, ...]
    apply_as_deletes: str | None = None
    except_columns: tuple[str, ...] = ()
    stored_as_scd_type: int = 1
    columns: tuple[str, ...] | None = None
    track_history_columns: tuple[str, ...] | None = None
    track_history_except_columns: tuple[str, ...] = ()
    tombstone_retention_ms: int = field(default_factory=lambda: parse_duration_ms(DEFAULT_TOMBSTONE_RETENTION))

    @classmethod
    def make(cls, keys: Any, sequence_by: Any, apply_as_deletes: str | None = None, except_columns: Any = None,
             stored_as_scd_type: Any = 1, **kw: Any) -> "ApplyChangesSpec":
        for alias, name in ALIASES.items():
            if alias in kw:
                kw[name] = kw.pop(alias)
        unknown = set(kw) - {"columns", "track_history_columns", "track_history_except_columns",
                             "tombstone_retention"}
        if unknown:
            raise TypeError(f"apply_changes: unknown arguments {sorted(unknown)}")
        keys = _names("keys", keys)
        if not keys:
            raise ValueError("apply_changes: keys=[...] needs at least one column")
        seq = _names("sequence_by", sequence_by)
        if not seq:
            raise ValueError("apply_changes: sequence_by names the column (or columns) that order the changes")
        if str(stored_as_scd_type) not in ("1", "2"):
            raise ValueError(f"apply_changes: stored_as_scd_type={stored_as_scd_type!r}; use 1 or 2")
        scd = int(str(stored_as_scd_type))
        track, track_except = kw.get("track_history_columns"), kw.get("track_history_except_columns")
        if scd != 2 and (track or track_except):
            raise ValueError("apply_changes: track_history_columns / track_history_except_columns need "
                             "stored_as_scd_type=2")
        if track and track_except:
            raise ValueError("apply_changes: give track_history_columns or track_history_except_columns, not both")
        if kw.get("columns") and except_columns:
            raise ValueError("apply_changes: give columns or except_columns, not both")
        retention = parse_duration_ms(kw.get("tombstone_retention") or DEFAULT_TOMBSTONE_RETENTION)
        return cls(keys, seq, apply_as_deletes, _names("except_columns", except_columns), scd,
                   _names("columns", kw["columns"]) if kw.get("columns") else None,
                   _names("track_history_columns", track) if track else None,
                   _names("track_history_except_columns", track_except), retention)


def _names(what: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not all(isinstance(v, str) for v in value):
        raise TypeError(f"apply_changes: {what} must be column names, got {value!r}")
    return tuple(value)
