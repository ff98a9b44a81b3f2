"""A NaN planted on rank 1 before an all_reduce, in a real 2-rank gloo job dumped by msprobe's own
PrecisionDebugger at mix, is traced to rank 1's op, not to rank 0's all_reduce output; the clean step
before it reports nothing. The job is the runnable example of docs/anomaly_origin.md, run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.core.anomaly import find_origins, read_step
from msprobe.core.cli import main

DOC = Path(__file__).resolve().parents[3] / "docs" / "anomaly_origin.md"


@pytest.fixture(scope="module")
def two_rank_dump(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("anomaly")
    script = work / "nan_job.py"
    script.write_text(re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)[0])
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
        cwd=work, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return work / "dump"


@pytest.mark.slow
def test_nan_planted_on_rank1_is_traced_to_rank1s_op(two_rank_dump, tmp_path, capsys):
    rank0 = json.loads((two_rank_dump / "step1" / "rank0" / "dump.json").read_text())["data"]
    reduce = rank0["Distributed.all_reduce.0.forward"]
    assert reduce["output"][0]["Max"] != reduce["output"][0]["Max"]  # rank 0's all_reduce output is NaN
    origins = find_origins(read_step(two_rank_dump / "step1"))
    assert [(o.rank, o.entry, o.kind) for o in origins] == [(1, "Torch.log.0.forward", "produced")]
    assert "rank 0 Distributed.all_reduce.0.forward" in origins[0].via
    assert main(["-f", "pytorch", "anomaly_origin", "-i", str(two_rank_dump / "step1"), "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rank 1: Torch.log.0.forward turned finite inputs into inf/NaN (reached from rank 0 " in out
    assert "nan_job.py, line 13, in <module>, hidden = torch.log(hidden - 10.0)" in out  # the doc's line
    assert json.loads((tmp_path / "anomaly_origin.json").read_text())["first"]["rank"] == 1


@pytest.mark.slow
def test_clean_step_of_the_same_job_reports_nothing(two_rank_dump):
    assert sorted(p.name for p in (two_rank_dump / "step0").iterdir()) == ["rank0", "rank1"]
    assert find_origins(read_step(two_rank_dump / "step0")) == []
