"""benchmarks/RESULTS.md is written by the benchmarks: each run replaces its own section with its
figures and where they were measured, and leaves the others as they were."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks import results

ORIGIN = results.Provenance(recorded="2026-11-27 19:40 UTC", commit="abc1234", command="python benchmarks/x.py",
                            machine="2 cores, 7.8 GiB, Some CPU", load="0.50 / 0.40 / 0.30 at the start, ...")
ROOT = Path(__file__).resolve().parents[2]


def test_a_run_replaces_its_own_section_and_keeps_the_others(tmp_path):
    path = tmp_path / "RESULTS.md"
    results.record("onboarding", {"first": {"p50_ms": 97.0}}, path=path, origin=ORIGIN)
    results.record("billing_close", {"close_s": 0.946}, path=path, origin=ORIGIN)
    results.record("onboarding", {"first": {"p50_ms": 88.5}, "teams": 100}, path=path, origin=ORIGIN)

    text = path.read_text()
    assert text.startswith(results.HEADER)
    assert list(results.sections(text)) == ["billing_close", "onboarding"]
    assert "| `first.p50_ms` | 88.5 |" in text and "97.0" not in text
    assert "| `teams` | 100 |" in text and "| `close_s` | 0.946 |" in text


def test_each_section_says_when_where_and_on_what_its_figures_were_measured(tmp_path):
    path = tmp_path / "RESULTS.md"
    results.record("live_page", {"calls": 42}, path=path, origin=ORIGIN)

    section = results.sections(path.read_text())["live_page"]
    for line in ("- recorded: 2026-11-27 19:40 UTC", "- commit: abc1234", "- command: `python benchmarks/x.py`",
                 "- machine: 2 cores, 7.8 GiB, Some CPU", "- load average: 0.50 / 0.40 / 0.30 at the start"):
        assert line in section


def test_nested_figures_become_one_row_each_and_plain_lists_stay_one_row():
    rows = dict(results._flat({"sweep": [{"rate": 5, "p95": 214.7}], "load": [1.0, 4.6], "ok": True, "n": float("nan")}))
    assert rows == {"sweep[0].rate": "5", "sweep[0].p95": "214.7", "load": "1.0, 4.6", "ok": "True", "n": "NaN"}


def test_this_machine_is_described_by_its_cores_memory_and_cpu():
    assert re.fullmatch(r"\d+ cores(, \d+\.\d GiB)?, .+", results.machine())
    origin = results.provenance()
    assert origin.commit and origin.recorded.endswith("UTC") and "at the start" in origin.load


def test_every_benchmark_script_that_prints_figures_records_them():
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        if script.name in {"__init__.py", "stats.py", "results.py", "locustfile.py"}:
            continue  # helpers: the percentile rule, the recorder, the people locust runs for load_pages.py
        text = script.read_text()
        # Under its own name, or under the name its --name says, which defaults to its own.
        named = 'record(args.name, ' in text and f'"--name", default="{script.stem}"' in text
        assert f'record("{script.stem}", ' in text or named, f"{script.name} prints figures RESULTS.md never gets"


def test_the_committed_results_file_is_in_the_form_the_benchmarks_write():
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    assert text.startswith(results.HEADER)
    found = results.sections(text)
    assert found and list(found) == sorted(found)
    assert text == results.HEADER + "".join(f"\n{found[name]}" for name in found)
