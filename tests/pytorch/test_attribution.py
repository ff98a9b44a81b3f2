"""Replay attribution (``compare --attribute``): each suspect replayed on the bench's and the target's inputs.

Three faults, three parts of the split (kernel = target vs replay on the target's inputs, dtype = replay
on the bench's inputs vs bench, inherited = the two replays' difference):

- **A wrong kernel only the target's process has** (the issue's case): the zoo's GPT-2, bf16 autocast
  against fp32, where the target's process replaces ``aten::native_layer_norm`` by one that scales the
  normalised values by 1.1; the bench run and this process are plain. The first LayerNorm's inputs pass,
  so it is ``local (target's kernel)``, never ``inherited``, and what follows it is ``inherited``.
- **A faulty bf16 kernel this device shares**: a small net, bf16 autocast against fp32, with ``aten::gelu``
  replaced in this process, for the tests' duration, by one that scales bfloat16 results by 1.25 (float32
  stays right, so the bench is unaffected). The replay here reproduces the fault on the bench's inputs:
  ``local (dtype)`` — what the target's dtype does on this device — and every diverging API after it
  ``inherited`` (the random dropout is not replayed and says why); the three parts of the residual add and
  of GELU are checked against float64 numpy computations.
- **The dtype alone**: the docs' example, a float16 ``exp`` that overflows, is ``local (dtype)``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_models import dump_one_step

from msprobe.core import cli
from msprobe.core.compare import CompareError
from msprobe.core.compare.api import compare_api
from msprobe.core.compare.judge.attribution import CONFIG_NAME, INHERITED, LOCAL, PARTS
from msprobe.core.compare.read.tensorfile import TensorSpec, load_npy
from msprobe.core.compare.report.table import ATTRIBUTION
from msprobe.core.config import load_config
from msprobe.pytorch.compare import compare
from msprobe.pytorch.run_ut.attribution import TorchReplay

FAULT = 1.25
BF16_UNIT, SLACK = 2.0**-8, 8.0
GELU = "Functional.gelu.0.forward"
ADD = "Tensor.__add__.0.forward"
DROPOUT = "Functional.dropout.0.forward"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 32)
        self.fc3, self.fc4 = nn.Linear(32, 32), nn.Linear(32, 8)

    def forward(self, x):
        a = torch.tanh(self.fc1(x))
        h = F.gelu(self.fc2(a))  # the faulty kernel in bf16
        h = F.dropout(h + a, 0.1, training=True)  # random: cannot be replayed
        h = torch.tanh(self.fc3(h))
        return self.fc4(h)


def faulty_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    y = 0.5 * x.float() * (1 + torch.erf(x.float() * 0.5**0.5))
    return (y * FAULT if x.dtype == torch.bfloat16 else y).to(x.dtype)


@pytest.fixture(scope="module")
def faulty_kernel():
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for device in ("CPU", "CUDA"):  # compare replays on the current device: the GPU where there is one
            library.impl("gelu", faulty_gelu, device)
    yield
    library._destroy()


def dump(root: Path, task: str, bf16: bool, config: Path | None = None) -> Path:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    return dump_one_step(net, lambda m: m(x).square().mean(), root, task=task, level="L1",
                         autocast=torch.bfloat16 if bf16 else None, config_path=config) / "dump.json"


@pytest.fixture(scope="module")
def dumps(faulty_kernel, tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("attribution")
    return {(task, run): dump(root / task / run, task, run == "bf16")
            for task in ("tensor", "statistics") for run in ("fp32", "bf16")}


@pytest.fixture(scope="module")
def attributed(dumps, tmp_path_factory):
    out = tmp_path_factory.mktemp("attributed")
    return compare({"npu_path": str(dumps["tensor", "bf16"]), "bench_path": str(dumps["tensor", "fp32"])}, out,
                   workers=1, attribute=10)


def entry_order(dump_json: Path) -> list[str]:
    return list(json.loads(dump_json.read_text())["data"])


def test_a_faulty_kernel_this_device_shares_is_local_dtype_and_what_follows_inherited(dumps, attributed):
    found = attributed.attribution
    names = [e.entry for e in found.entries]
    order = entry_order(dumps["tensor", "bf16"])
    assert names[0] == GELU  # bf16 rounding before it is not a suspect
    assert names == sorted(names, key=order.index) and all(n.endswith(".forward") for n in names)
    verdicts = {e.entry: e.verdict for e in found.entries}
    assert verdicts[GELU] == LOCAL and found.entries[0].label == "local (dtype)"
    later = [e for e in found.entries[1:] if e.entry != DROPOUT]
    assert len(later) >= 3 and all(e.verdict == INHERITED for e in later)
    assert attributed.first_divergence.entry == GELU
    gelu = found.entries[0]
    assert gelu.worst("dtype").excess > 1 > max(gelu.worst("kernel").excess, gelu.worst("inherited").excess)


def test_a_random_api_is_not_replayed_and_says_why(attributed):
    dropout = next(e for e in attributed.attribution.entries if e.entry == DROPOUT)
    assert dropout.verdict == "" and "random" in dropout.reason


def bf16(values: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even) through float32, as torch's CPU kernels do, in numpy."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def saved(dump_json: Path, name: str) -> np.ndarray:
    tensor = torch.load(dump_json.parent / "dump_tensor_data" / f"{name}.pt", weights_only=True)
    return tensor.double().numpy()


def numpy_share(part: np.ndarray, bench: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> dict:
    """The measures of one error share ``a - b`` in float64: ‖a-b‖/‖bench‖, cosine(a, b), max |a-b|, excess."""
    norm = float(np.sqrt(np.sum(part**2)))
    return {"norm_rel": norm / float(np.sqrt(np.sum(bench**2))),
            "cosine": float(np.sum(a * b) / np.sqrt(np.sum(a * a) * np.sum(b * b))),
            "max_abs": float(np.max(np.abs(part))), "excess": norm / (SLACK * BF16_UNIT * scale)}


def check_share(share, want: dict, rel: float) -> None:
    for key, value in want.items():
        assert getattr(share, key) == pytest.approx(value, rel=rel, abs=1e-12 if key == "cosine" else 0), key


def split_of(attributed, entry: str):
    found = next(e for e in attributed.attribution.entries if e.entry == entry)
    assert len(found.outputs) == 1
    return found.outputs[0]


def test_the_residual_add_split_matches_float64_numpy(dumps, attributed):
    """bf16 + bf16 in torch is the float32 sum (exact here) rounded to bf16: numpy reproduces it bit for bit,
    on the bench's inputs and on the target's."""
    target, bench = dumps["tensor", "bf16"], dumps["tensor", "fp32"]
    on_bench, on_target = (bf16(bf16(saved(side, f"{ADD}.input.0")) + bf16(saved(side, f"{ADD}.input.1")))
                           for side in (bench, target))
    b, t = saved(bench, f"{ADD}.output.0"), saved(target, f"{ADD}.output.0")
    scale = max(np.sqrt(np.sum(b**2)), np.sqrt(np.sum(t**2)))
    split = split_of(attributed, ADD)
    check_share(split.dtype, numpy_share(on_bench - b, b, on_bench, b, scale), 1e-9)
    check_share(split.inherited, numpy_share(on_target - on_bench, b, on_target, on_bench, scale), 1e-9)
    assert split.kernel.norm_rel == 0 and split.kernel.excess == 0  # the target's add is this device's
    assert split.verdict == INHERITED


def test_the_faulty_gelu_split_matches_float64_numpy(dumps, attributed):
    """GELU in float64 on the bench input rounded to bf16, times the fault, rounded to bf16; float32's erf
    may round a rare element to the neighbouring bf16 value, hence the tolerance."""
    target, bench = dumps["tensor", "bf16"], dumps["tensor", "fp32"]
    erf = np.vectorize(math.erf)
    on_bench, on_target = (bf16(FAULT * 0.5 * x * (1 + erf(x / math.sqrt(2))))
                           for x in (bf16(saved(side, f"{GELU}.input.0")) for side in (bench, target)))
    b, t = saved(bench, f"{GELU}.output.0"), saved(target, f"{GELU}.output.0")
    scale = max(np.sqrt(np.sum(b**2)), np.sqrt(np.sum(t**2)))
    split = split_of(attributed, GELU)
    check_share(split.dtype, numpy_share(on_bench - b, b, on_bench, b, scale), 1e-2)
    rare = 2 * BF16_UNIT / np.sqrt(b.size)  # one element a bf16 step away
    for share, part in ((split.inherited, on_target - on_bench), (split.kernel, t - on_target)):
        assert share.norm_rel == pytest.approx(np.sqrt(np.sum(part**2) / np.sum(b**2)), abs=rare)
    assert split.kernel.excess < 1  # the target's GELU is this device's
    assert split.dtype.norm_rel == pytest.approx(FAULT - 1, rel=0.05)  # the fault itself


def read_csv(out: Path) -> list[dict]:
    with open(next(out.glob("compare_result_*.csv")), newline="") as handle:
        return list(csv.DictReader(handle))


def test_reports_carry_the_split_and_the_chain(attributed):
    out = attributed.reports["csv"].parent
    rows = {row["NPU Name"]: row for row in read_csv(out)}
    assert all(column in rows[f"{GELU}.output.0"] for column in ATTRIBUTION)
    gelu = rows[f"{GELU}.output.0"]
    assert gelu["Attribution"] == f"local (dtype), replayed on {attributed.attribution.device}"
    split = split_of(attributed, GELU)
    for part in PARTS:
        assert float(gelu[f"{part.capitalize()} Excess"]) == getattr(split, part).excess
    assert rows[f"{GELU}.input.0"]["Attribution"] == "API: local (dtype)"
    assert rows[f"{ADD}.output.0"]["Attribution"].startswith(f"{INHERITED}, replayed on ")
    assert rows[f"{DROPOUT}.output.0"]["Attribution"].startswith("not replayed: random")
    assert rows["Functional.linear.0.forward.output.0"]["Attribution"] == ""
    page = attributed.reports["html"].read_text()
    chain = page[page.index("<h2>Attribution</h2>"):]
    assert "Functional.linear.3.forward <b>(inherited)</b> → " in chain
    assert f"→ {GELU} <b>(local (dtype))</b>" in chain
    device = attributed.attribution.device
    assert f"replayed on {device} at the target&#x27;s dtype" in chain and f"against {device}&#x27;s kernel" in chain


def compare_json(dumps, folder: Path) -> Path:
    config = folder / "compare.json"
    paths = {"npu_path": str(dumps["tensor", "bf16"]), "bench_path": str(dumps["tensor", "fp32"])}
    config.write_text(json.dumps(paths))
    return config


def test_the_cli_prints_the_local_api_with_both_numbers(dumps, faulty_kernel, tmp_path, msprobe_log):
    config = compare_json(dumps, tmp_path)
    assert cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(tmp_path / "out"), "-j", "1",
                     "--attribute", "2"]) == 0
    line = next(m for m in msprobe_log.messages if m.startswith("first divergence:"))
    assert line.startswith(f"first divergence: {GELU} (the earliest API the replays find made here — local (dtype): "
                           f"relative to the bench output's norm, target's kernel ")
    assert ", dtype " in line and ", inherited " in line
    assert sum(m.startswith("attribution: ") and ".forward " in m for m in msprobe_log.messages) == 2
    device = str(TorchReplay().device)
    head = next(m for m in msprobe_log.messages if m.startswith("attribution: the first 2 "))
    assert f"replayed on {device} at the target's dtype" in head and f"against {device}'s kernel" in head


@pytest.mark.parametrize("extra", [["--attribute", "0"], ["--attribute", "x"], ["-c", "--attribute"]])
def test_bad_attribute_options_stop_before_work(dumps, tmp_path, extra):
    config = compare_json(dumps, tmp_path)
    try:
        code = cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(tmp_path / "out"), *extra])
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    assert code == 2 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("side", ["fp32", "bf16"])
def test_a_missing_input_file_is_reported_on_its_api(dumps, faulty_kernel, tmp_path, side):
    """The bench's input (the first replay) or the target's (the second: the reason says so)."""
    paths = {run: str(dumps["tensor", run]) for run in ("fp32", "bf16")}
    copy = shutil.copytree(dumps["tensor", side].parent, tmp_path / side) / "dump.json"
    (copy.parent / "dump_tensor_data" / "Functional.linear.2.forward.input.1.pt").unlink()
    paths[side] = str(copy)
    result = compare({"npu_path": paths["bf16"], "bench_path": paths["fp32"]}, tmp_path / "out", workers=1,
                     attribute=10)
    linear = next(e for e in result.attribution.entries if e.entry == "Functional.linear.2.forward")
    assert linear.verdict == "" and "Functional.linear.2.forward.input.1.pt" in linear.reason
    assert "missing" in linear.reason and ("on the target's inputs" in linear.reason) == (side == "bf16")
    assert result.first_divergence.entry == GELU


def test_statistics_dumps_get_the_config_that_dumps_the_suspects(dumps, faulty_kernel, tmp_path):
    """The printed config is the user's next step: dumping both runs with it and comparing attributes GELU."""
    result = compare({"npu_path": str(dumps["statistics", "bf16"]), "bench_path": str(dumps["statistics", "fp32"])},
                     tmp_path / "out", workers=1, attribute=10)
    found = result.attribution
    names = [e.entry for e in found.entries]
    assert names[0] == GELU and all(e.verdict == "" for e in found.entries)
    assert found.config_path == tmp_path / "out" / CONFIG_NAME
    config = json.loads(found.config_path.read_text())
    assert config == found.config and config["task"] == "tensor" and config["tensor"]["list"] == names
    assert load_config(found.config_path, framework="pytorch").task == "tensor"  # a valid config.json
    again = {run: dump(tmp_path / run, "tensor", run == "bf16", found.config_path) for run in ("fp32", "bf16")}
    forward = [n for n in entry_order(again["bf16"]) if n.endswith(".forward")]
    assert forward == names
    replayed = compare({"npu_path": str(again["bf16"]), "bench_path": str(again["fp32"])}, tmp_path / "out2",
                       workers=1, attribute=10)
    assert replayed.attribution.entries[0].verdict == LOCAL and replayed.first_divergence.entry == GELU


def test_the_docs_example_runs_and_names_the_float16_overflow(tmp_path):
    """docs/compare.md's attribution example, run as written: the float16 exp is local (dtype), what follows
    inherited."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "compare.md").read_text()
    section = doc[doc.index("## Attribution"):]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first, verdicts = done.stdout.strip().split(" ", 1)
    assert first == "Torch.exp.0.forward"
    assert verdicts.startswith("[('Torch.exp.0.forward', 'local (dtype)'), ") and verdicts.count("'inherited'") >= 2


# --- a wrong kernel that exists only in the target's process (the zoo's GPT-2) ------------------------------

LN_FAULT = 1.1
LAYER_NORM = "Functional.layer_norm.0.forward"
GPT2_DUMP = f"""
import sys

import torch
from zoo import ZOO

from msprobe.pytorch import PrecisionDebugger


def faulty_layer_norm(x, shape, weight, bias, eps):
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    mean = x.float().mean(dims, keepdim=True)
    rstd = torch.rsqrt(x.float().var(dims, unbiased=False, keepdim=True) + eps)
    y = (x.float() - mean) * rstd * {LN_FAULT}
    y = y * weight if weight is not None else y
    y = y + bias if bias is not None else y
    return y.to(x.dtype), mean, rstd


out, run = sys.argv[1], sys.argv[2]
if run == "target":  # bf16 autocast and, in this process only, a LayerNorm kernel that scales its result
    library = torch.library.Library("aten", "IMPL")
    library.impl("native_layer_norm", faulty_layer_norm, "CPU")
spec = next(s for s in ZOO if s.name == "gpt2")
torch.manual_seed(0)
model = spec.build()
batch = spec.batch(torch.Generator().manual_seed(1))
debugger = PrecisionDebugger(dump_path=out, task="tensor", level="L1", step=[0])
debugger.start(model)
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=run == "target"):
    spec.loss(model, batch)
debugger.stop()
debugger.step()
debugger.finish()
"""


@pytest.fixture(scope="module")
def gpt2_attributed(tmp_path_factory):
    """One forward of GPT-2 dumped in tensor mode by two processes at once (bench fp32, target bf16 with the
    faulty kernel), then compared here, where ``native_layer_norm`` is torch's own."""
    root = tmp_path_factory.mktemp("gpt2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    runs = {run: subprocess.Popen([sys.executable, "-c", GPT2_DUMP, str(root / run), run], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for run in ("bench", "target")}
    for process in runs.values():
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
    dumps = {run: root / run / "step0" / "rank" / "dump.json" for run in runs}
    result = compare({"npu_path": str(dumps["target"]), "bench_path": str(dumps["bench"])}, root / "out", workers=1,
                     attribute=3)
    return dumps, result


def test_a_wrong_kernel_only_the_target_has_is_local_target_kernel_not_inherited(gpt2_attributed):
    """The issue's case: the first LayerNorm's inputs pass and its output does not. The replay on the bench's
    inputs reproduces the bench (this device's kernel is right), which alone would call it inherited; the
    replay on the target's own inputs shows the target's kernel made the error."""
    dumps, result = gpt2_attributed
    entries = result.attribution.entries
    layer_norm = entries[0]
    assert layer_norm.entry == LAYER_NORM == result.first_divergence.entry and result.first_divergence.inputs_pass
    assert layer_norm.inputs_pass and layer_norm.verdict == LOCAL and layer_norm.label == "local (target's kernel)"
    kernel, dtype, inherited = (layer_norm.worst(p) for p in PARTS)
    assert kernel.excess > 1 > max(dtype.excess, inherited.excess)
    # independent reference: torch's LayerNorm (weight 1, bias 0 at init) in float64 on the target's input
    x = saved(dumps["target"], f"{LAYER_NORM}.input.0")
    right = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    t, b = saved(dumps["target"], f"{LAYER_NORM}.output.0"), saved(dumps["bench"], f"{LAYER_NORM}.output.0")
    assert kernel.norm_rel == pytest.approx(np.sqrt(np.sum((t - right) ** 2) / np.sum(b**2)), rel=1e-4)
    assert kernel.norm_rel == pytest.approx(LN_FAULT - 1, rel=1e-3)
    assert [e.verdict for e in entries[1:]] == [INHERITED, INHERITED]  # what reads its output inherits


# --- the framework-free half, with a replay written in numpy (msprobe.core never imports torch) ----------

def write_npy_dump(rank_dir: Path, calls: list[tuple[str, np.ndarray, np.ndarray]]) -> Path:
    """A float32 tensor dump.json (+ .npy files) of one-input, one-output forward calls."""
    (rank_dir / "dump_tensor_data").mkdir(parents=True)
    data = {}
    for entry, x, y in calls:
        record: dict = {"input_args": [], "input_kwargs": {}, "output": []}
        for key, part, array in (("input_args", "input", x), ("output", "output", y)):
            name = f"{entry}.{part}.0.npy"
            np.save(rank_dir / "dump_tensor_data" / name, array.astype(np.float32))
            record[key].append({"type": "numpy.ndarray", "dtype": "float32", "shape": list(array.shape),
                                "data_name": name})
        data[entry] = record
    (rank_dir / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "dump_data_dir": None,
                                                    "data": data}))
    return rank_dir / "dump.json"


KERNELS = {"Torch.double": lambda x: 2 * x, "Torch.triple": lambda x: 3 * x,
           "Torch.squash": lambda x: np.float32(1.1) * (np.float32(1e-6) * x + 5),
           "Torch.cancel": lambda x: (x - np.float32(5)) * np.float32(1e3)}


class NumpyReplay:
    """This device's kernels in numpy: ``squash`` carries a 10% fault at the target's dtype, the others are right."""

    device = "numpy"

    def __call__(self, request):
        kernel = KERNELS.get(request.entry.rsplit(".", 2)[0])
        if kernel is None:
            return "no kernel"
        value = request.inputs_record["input_args"][0]
        return [kernel(request.loader(request.inputs_dir / value["data_name"], TensorSpec.of(value)))]


def noise(seed: int, size: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(size).astype(np.float32)


@pytest.fixture
def npy_pair(tmp_path):
    """Five independent float32 calls, each (bench input, bench output, target input, target output):

    - ``double``: the target's input differs (noise 1e-3, as a changed batch would): the first diverging
      value, so the rule names it, yet its kernel is right: ``inherited``;
    - ``squash``: the target's output is what this device's faulty kernel makes of its input: ``local (dtype)``;
    - ``triple``: same input, the target's kernel adds noise 1e-2 that this device's does not: ``local
      (target's kernel)``;
    - ``cancel``: inputs one float32 step apart (within rounding), which ``x - 5`` turns into a large relative
      error: the inherited part is beyond rounding, but its inputs pass, so ``local (input rounding)``;
    - ``other``: no kernel here: not replayed."""
    x, z, w = noise(0), noise(2), noise(3)
    x_t = x + np.float32(1e-3) * noise(1)
    u = np.float32(5) + np.float32(1e-3) * noise(4)
    u_t = np.nextafter(u, np.float32(np.inf))
    calls = {"Torch.double.0.forward": (x, 2 * x, x_t, 2 * x_t),
             "Torch.squash.0.forward": (2 * x, 1e-6 * (2 * x) + 5, 2 * x_t, KERNELS["Torch.squash"](2 * x_t)),
             "Torch.triple.0.forward": (z, 3 * z, z, 3 * z + np.float32(1e-2) * noise(5)),
             "Torch.cancel.0.forward": (u, KERNELS["Torch.cancel"](u), u_t, KERNELS["Torch.cancel"](u_t)),
             "Torch.other.0.forward": (w, w, w, w + 1)}
    bench = write_npy_dump(tmp_path / "bench" / "rank", [(name, c[0], c[1]) for name, c in calls.items()])
    target = write_npy_dump(tmp_path / "npu" / "rank", [(name, c[2], c[3]) for name, c in calls.items()])
    return {"npu_path": str(target), "bench_path": str(bench)}


def test_the_earliest_local_api_replaces_the_rules_first_divergence(npy_pair, tmp_path):
    plain = compare_api(load_npy, npy_pair, tmp_path / "plain", workers=1)
    assert plain.first_divergence.entry == "Torch.double.0.forward" and plain.first_divergence.inputs_pass
    result = compare_api(load_npy, npy_pair, tmp_path / "out", workers=1, attribute=5, replay=NumpyReplay())
    verdicts = [(e.entry, e.label, e.reason) for e in result.attribution.entries]
    assert verdicts == [("Torch.double.0.forward", INHERITED, ""), ("Torch.squash.0.forward", "local (dtype)", ""),
                        ("Torch.triple.0.forward", "local (target's kernel)", ""),
                        ("Torch.cancel.0.forward", "local (input rounding)", ""),
                        ("Torch.other.0.forward", "", "no kernel")]
    assert result.first_divergence.entry == "Torch.squash.0.forward"
    cancel = result.attribution.entries[3]
    assert cancel.inputs_pass and cancel.worst("inherited").excess > 1  # beyond rounding, yet not inherited
    one = compare_api(load_npy, npy_pair, tmp_path / "one", workers=1, attribute=1, replay=NumpyReplay())
    assert [e.entry for e in one.attribution.entries] == ["Torch.double.0.forward"]
    assert one.first_divergence.entry == "Torch.double.0.forward"  # no local suspect: the rule's choice stays


@pytest.mark.parametrize("options, message", [
    ({"attribute": 2}, "cannot replay"), ({"attribute": -1}, "positive integer"),
    ({"attribute": True, "replay": NumpyReplay()}, "positive integer"),
    ({"attribute": 2, "replay": NumpyReplay(), "auto_analyze": False}, "-c")])
def test_bad_attribute_arguments_name_the_field(npy_pair, tmp_path, options, message):
    with pytest.raises(CompareError, match=message) as caught:
        compare_api(load_npy, npy_pair, tmp_path / "out", workers=1, **options)
    assert "attribute" in str(caught.value) and not (tmp_path / "out").exists()


def test_attribution_of_step_directories_is_refused(npy_pair, tmp_path):
    dirs = {side: str(Path(path).parent.parent) for side, path in npy_pair.items()}
    with pytest.raises(CompareError, match="one rank: give dump.json files"):
        compare_api(load_npy, dirs, tmp_path / "out", workers=1, attribute=2, replay=NumpyReplay())
