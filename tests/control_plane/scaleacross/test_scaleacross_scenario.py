"""Scenario files: loading, defaults, and errors that name the field."""

from __future__ import annotations

import json

import pytest
import yaml

from control_plane.scaleacross.plan import resolve_plan
from control_plane.scaleacross.scenario import ScenarioError, load_scenario, parse_scenario
from host.paths import SCALEACROSS_SCENARIOS
from tests.support.scaleacross import SMALL, raw, scenario

SCENARIOS = sorted(SCALEACROSS_SCENARIOS.glob("*"))


def test_json_and_yaml_load_the_same(tmp_path):
    pj, py = tmp_path / "s.json", tmp_path / "s.yaml"
    pj.write_text(json.dumps(SMALL))
    py.write_text(yaml.safe_dump(SMALL))
    a, b = load_scenario(pj), load_scenario(py)
    assert a.model == b.model and a.cluster == b.cluster
    assert a.cluster.total_gpus == 128
    assert a.model.ffn == 4 * 2048 and a.model.kv == 16 and not a.model.is_moe
    assert a.dtype == "bf16" and a.global_batch == 256


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_load(path):
    sc = load_scenario(path)
    assert 2 <= len(sc.cluster.buildings) <= 4
    assert sc.global_batch > 0


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda r: r["model"].pop("hidden"), "model.hidden"),
    (lambda r: r["model"].update(hidden=2050), "model.heads"),
    (lambda r: r["model"].update(layer=3), "model.layer"),
    (lambda r: r["model"].update(top_k=4), "model.top_k"),
    (lambda r: r["hardware"].update(nic_gbps=-1), "hardware.nic_gbps"),
    (lambda r: r["hardware"].update(gpus_per_node="8"), "hardware.gpus_per_node"),
    (lambda r: r["cluster"]["buildings"].append({"gpus": 12}), "cluster.buildings[2].gpus"),
    (lambda r: r["cluster"].update(buildings=[]), "cluster.buildings"),
    (lambda r: r["cluster"]["cross_building"].update(oversubscription=0.5),
     "cluster.cross_building.oversubscription"),
    (lambda r: r["cluster"]["cross_building"].update(thc=True), "cluster.cross_building.thc"),
    (lambda r: r.update(training={}), "parallel.global_batch"),
    (lambda r: r.update(parallel={"recompute": "some"}), "parallel.recompute"),
    (lambda r: r.update(parallel={"zero": 4}), "parallel.zero"),
    (lambda r: r.update(parallel={"embedding_stage": "yes"}), "parallel.embedding_stage"),
    (lambda r: r["training"].update(grad_dtype="fp64"), "training.grad_dtype"),
    (lambda r: r["training"].update(grad_accum_pass=1), "training.grad_accum_pass"),
    (lambda r: r["training"].update(zero_grad_allreduce="no"), "training.zero_grad_allreduce"),
    (lambda r: r["training"].update(fused_attention="yes"), "training.fused_attention"),
    (lambda r: r["hardware"].update(attention_peak_tflops=0), "hardware.attention_peak_tflops"),
    (lambda r: r["hardware"].update(peak_tflops=float("nan")), "hardware.peak_tflops"),
    (lambda r: r["hardware"].update(nic_gbps=float("inf")), "hardware.nic_gbps"),
    (lambda r: r["model"].update(layers=float("inf")), "model.layers"),
    (lambda r: r["cluster"]["cross_building"].update(latency_us=float("nan")),
     "cluster.cross_building.latency_us"),
])
def test_errors_name_the_field(mutate, field):
    r = raw()
    mutate(r)
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(r)
    assert str(exc.value).startswith(field), str(exc.value)


@pytest.mark.parametrize(("parallel", "field"), [
    ({"tp": 3, "pp": 1}, "parallel.tp"),
    ({"tp": 1, "pp": 3}, "parallel.pp"),
    ({"tp": 1, "pp": 4, "interleave": 3}, "parallel.interleave"),
    ({"tp": 1, "pp": 4, "embedding_stage": True}, "parallel.pp"),  # 4 does not divide 16 + 2
    ({"tp": 1, "pp": 1, "dp": 3}, "parallel.global_batch"),
    ({"tp": 8, "pp": 4, "dp": 8}, "parallel.dp"),
    ({"tp": 1, "pp": 1, "ep": 2}, "parallel.ep"),
    ({"tp": 1, "pp": 1, "cp": 3}, "parallel.cp"),
    ({"tp": 1, "pp": 1, "dp_sync": "ina"}, "parallel.dp_sync"),
    ({"microbatch": 2}, "parallel"),
])
def test_plan_errors_name_the_field(parallel, field):
    sc = scenario(parallel=parallel)
    with pytest.raises(ScenarioError) as exc:
        resolve_plan(sc)
    assert str(exc.value).startswith(field), str(exc.value)


def test_plan_defaults_fill_the_cluster_and_pick_the_crossing():
    pl = resolve_plan(scenario(parallel={"tp": 8, "pp": 1}))
    assert pl.dp == 16 and pl.world == 128  # both buildings
    assert pl.cross == "dp" and pl.dp_sync == "hierarchical"
    assert pl.sequence_parallel and pl.recompute == "selective" and pl.zero == 1
    small = resolve_plan(scenario(parallel={"tp": 8, "pp": 1, "dp": 8}))
    assert small.cross == "none"  # 64 GPUs stay in one building
