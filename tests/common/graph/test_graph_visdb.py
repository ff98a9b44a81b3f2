"""``msprobe graph --file_type db`` (docs/graph.md#the-visdb-file): the SQLite ``.vis.db`` of msprobe 26.2.0,
checked with sqlite3 against what 26.2.0's own graph writer made of the same dump
(tests/data/up262_gpt2/build_26.vis.db), and loaded by 26.2.0's TensorBoard plugin's own reader."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

from msprobe.core.cli import main

DATA = Path(__file__).parents[2] / "data" / "up262_gpt2"
PLUGIN_PYTHON = Path("/work/venvs/tbga/bin/python")  # a venv with tb-graph-ascend 8.3.2 (docs/graph.md)
TABLES = ("tb_nodes", "tb_config", "tb_stack")


def _our_db(tmp_path: Path) -> Path:
    source = tmp_path / "input.json"
    source.write_text(json.dumps({"npu_path": str(DATA / "step0" / "proc14429")}))
    assert main(["-f", "pytorch", "graph", "-i", str(source), "-o", str(tmp_path / "out"), "--file_type", "db"]) == 0
    (database,) = (tmp_path / "out").glob("build_*.vis.db")
    assert len(list((tmp_path / "out").glob("build_*.vis"))) == 1  # the .vis and .html stay
    return database


def _read(path: Path) -> tuple[dict, dict, dict, dict]:
    with sqlite3.connect(path) as connection:
        schema = {t: [row[1:3] for row in connection.execute(f"PRAGMA table_info({t})")] for t in TABLES}
        stacks = dict(connection.execute("SELECT id, stack_info FROM tb_stack"))
        nodes = {row[0]: (row[1], row[2], json.loads(row[3] or "[]"), json.loads(row[4]).keys(),
                          json.loads(row[5]).keys(), json.loads(stacks[row[6]]))
                 for row in connection.execute("SELECT node_name, node_type, up_node, sub_nodes, input_data, "
                                               "output_data, stack_id FROM tb_nodes WHERE data_source = 'NPU'")}
        config = dict(zip(("graph_type", "micro_steps", "rank_list", "step_list"), connection.execute(
            "SELECT graph_type, micro_steps, rank_list, step_list FROM tb_config").fetchone()))
    return schema, nodes, config, stacks


def test_our_vis_db_holds_what_26_2_0s_writer_holds_for_the_same_dump(tmp_path):
    ours_schema, ours, ours_config, _ = _read(_our_db(tmp_path))
    theirs_schema, theirs, theirs_config, _ = _read(DATA / "build_26.vis.db")
    assert ours_schema == theirs_schema
    assert ours_config == theirs_config == {"graph_type": "build", "micro_steps": 1, "rank_list": "[0]",
                                            "step_list": "[0]"}
    assert ours.keys() == theirs.keys() and len(ours) == 77
    # Node for node the same type, parent, children (in order), argument names and stack, a parameters_grad entry
    # (under its module's backward node) with its rows named by parameter (``...parameters_grad.0.weight``)
    grads = [name for name in ours if ".parameters_grad." in name]
    assert len(grads) == 16 and all(ours[name][1].endswith(".backward.0") for name in grads)
    assert all(f"{name}.weight" in ours[name][3] and set(ours[name][3]) <= {f"{name}.weight", f"{name}.bias"}
               for name in grads)
    assert ours == theirs

@pytest.mark.skipif(not PLUGIN_PYTHON.is_file(), reason=f"no venv with tb-graph-ascend at {PLUGIN_PYTHON.parent.parent}"
                    " (python -m venv /work/venvs/tbga && /work/venvs/tbga/bin/pip install tb-graph-ascend==8.3.2)")
def test_the_tensorboard_plugin_lists_and_reads_our_vis_db(tmp_path):
    database = _our_db(tmp_path)
    script = textwrap.dedent("""
        import json, sys
        from server.app.repositories.graph_repo_db import GraphRepoDB
        from server.app.service.graph_service_base import GraphServiceStrategy
        from server.app.utils.global_state import GraphState
        GraphState.set_global_value("logdir", sys.argv[1])
        listed = GraphServiceStrategy.load_meta_dir()
        repo = GraphRepoDB(sys.argv[2])
        root = repo.query_root_nodes("NPU", 0, 0)
        print(json.dumps({"listed": listed, "config": repo.query_config_info(), "root": root,
                          "sub": sorted(repo.query_sub_nodes(root["node_name"], "NPU", 0, 0))}))
    """)
    done = subprocess.run([str(PLUGIN_PYTHON), "-c", script, str(database.parent), str(database)],
                          capture_output=True, text=True, timeout=300, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["listed"] == {"data": {"out": {"type": "db", "tags": [database.name[:-len(".vis.db")]]}},
                                "error": []}
    assert answer["config"]["isSingleGraph"] is True and answer["config"]["ranks"] == [0]
    assert answer["root"]["node_name"] == "DefaultModel"
    assert "Module.transformer.GPT2Model.forward.0" in answer["sub"]
