"""Loads servebench's AIPerf export with AIPerf's own pydantic models (AIPerf 0.13).

Usage: python validate_export.py DIR...   (each DIR holds profile_export.jsonl and
profile_export_aiperf.json). Every line of the JSONL must validate as AIPerf's
MetricRecordInfo and the aggregate as its JsonExportData; AIPerf's own JSONL loader
(aiperf.orchestrator.jsonl_loader) must yield the profiling records. Prints one line per
folder and exits 1 on the first file AIPerf's models refuse.
"""

import json
import sys
from pathlib import Path

import aiperf
from aiperf.common.models.export_models import JsonExportData
from aiperf.common.enums import MetricType
from aiperf.common.models.record_models import MetricRecordInfo
from aiperf.metrics.metric_registry import MetricRegistry
from aiperf.orchestrator.jsonl_loader import iter_profiling_records


def unit_of(tag: str, where: str) -> tuple[str, object]:
    """AIPerf's display unit for `tag` and its metric class; fails on a tag AIPerf lacks."""
    cls = MetricRegistry.get_class_or_none(tag)
    if cls is None:
        raise SystemExit(f"{where}: `{tag}` is not an AIPerf metric")
    return str(cls.display_unit or cls.unit), cls


def check(folder: Path) -> str:
    records = 0
    profiling = 0
    with open(folder / "profile_export.jsonl", "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                info = MetricRecordInfo.model_validate_json(line)
            except Exception as e:  # noqa: BLE001 - name the line, then fail
                raise SystemExit(f"{folder}/profile_export.jsonl:{n}: {e}")
            records += 1
            where = f"{folder}/profile_export.jsonl:{n}"
            for tag, value in info.metrics.items():
                unit, _ = unit_of(tag, where)
                if value.unit != unit:
                    raise SystemExit(f"{where}: {tag} in {value.unit}, AIPerf writes {unit}")
            meta = info.metadata
            if meta.request_end_ns < meta.request_start_ns:
                raise SystemExit(f"{where}: request ends before it starts")
            latency = info.metrics.get("request_latency")
            if latency is not None:
                span_ms = (meta.request_end_ns - meta.request_start_ns) / 1e6
                if abs(span_ms - latency.value) > 0.001:
                    raise SystemExit(f"{where}: request_latency {latency.value} ms, timestamps {span_ms} ms")
            if info.metadata.benchmark_phase == "profiling" and info.error is None:
                profiling += 1
    loaded = sum(1 for _ in iter_profiling_records(folder))
    if loaded != profiling:
        raise SystemExit(f"{folder}: AIPerf's loader read {loaded} records, expected {profiling}")
    text = (folder / "profile_export_aiperf.json").read_text()
    try:
        data = JsonExportData.model_validate_json(text)
    except Exception as e:  # noqa: BLE001
        raise SystemExit(f"{folder}/profile_export_aiperf.json: {e}")
    raw = json.loads(text)
    # Every metric is AIPerf's, in its display unit; `count` only on record metrics.
    for key, value in raw.items():
        if not (isinstance(value, dict) and "unit" in value):
            continue
        where = f"{folder}/profile_export_aiperf.json: {key}"
        unit, cls = unit_of(key, where)
        if value["unit"] != unit:
            raise SystemExit(f"{where}: in {value['unit']}, AIPerf writes {unit}")
        if cls.type in {MetricType.AGGREGATE, MetricType.DERIVED} and "count" in value:
            raise SystemExit(f"{where}: a scalar metric with a count")
        if key in JsonExportData.model_fields and getattr(data, key) is None:
            raise SystemExit(f"{where}: did not load")
    return f"{folder}: {records} records ({profiling} profiling, ok), aggregate ok"


def main() -> None:
    print(f"aiperf {aiperf.__version__}")
    for d in sys.argv[1:]:
        print(check(Path(d)))


if __name__ == "__main__":
    main()
