"""The benchmark scripts keep working (smoke run; no timed assertion)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_precision_script_measures_what_the_readme_claims():
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import precision
    finally:
        sys.path.remove(ROOT)
    rows = precision.measure(depth=16, window=32)
    assert max(row["keras_posenc float32"] for row in rows.values()) <= 2e-7
    assert rows[2**24]["naive float32"] > 0.1
    assert rows[2**11]["compute-dtype bfloat16"] > 0.5
    table = precision.markdown(rows, 32, 16)
    assert table.count("\n") == 9 and "| keras_posenc float32 |" in table


@pytest.mark.slow
def test_forward_benchmark_smoke(tmp_path):
    out = tmp_path / "forward.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.forward", "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| floor: x + table[s:s+L] |" in done.stdout
    results = json.loads(out.read_text())
    assert results["machine"]["cores"] >= 1 and results["copy_GBps"] > 0
    for shape in results["shapes"]:
        rows = {row["config"]: row for row in shape["rows"]}
        assert rows["floor: x + table[s:s+L]"]["function"]["ratio_to_floor"] == 1.0
        assert {"ours, compute", "ours, lookup", "classic tiled embedding_lookup",
                "TF tutorial table"} <= set(rows)
    first = {row["config"]: row for row in results["shapes"][0]["rows"]}
    assert first["ours, compute"]["function_peak_MiB"] is not None
    assert results["table_build"]["ours_s"] > 0
