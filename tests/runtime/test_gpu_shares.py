"""How much GPU each worker asks Ray for, computed from the whole placement plan (no Ray needed)."""

from __future__ import annotations

from rlhw.config import load_config_dict
from rlhw.placement import plan
from rlhw.runtime.group import gpu_shares


def _workstation_plan():
    cfg = load_config_dict(
        {
            "cluster": {
                "num_nodes": 1,
                "node_groups": [{"label": "gpu", "node_ranks": 0, "accelerators_per_node": 1}],
                "component_placement": {"rollout,learner": {"node_group": "gpu", "placement": "0"}},
            }
        }
    )
    return plan(cfg.cluster)


def test_components_sharing_one_gpu_each_ask_for_their_share_of_it():
    p = _workstation_plan()
    everything = [r for recs in p.values() for r in recs]
    for component in ("rollout", "learner"):
        assert gpu_shares(list(p[component]), everything) == {0: 0.5}


def test_a_gpu_used_by_one_process_is_requested_whole():
    cfg = load_config_dict(
        {
            "cluster": {
                "num_nodes": 1,
                "node_groups": [{"label": "gpu", "node_ranks": 0, "accelerators_per_node": 2}],
                "component_placement": {"learner": {"node_group": "gpu", "placement": "0-1"}},
            }
        }
    )
    p = plan(cfg.cluster)
    assert gpu_shares(list(p["learner"]), list(p["learner"])) == {0: 1.0, 1: 1.0}
