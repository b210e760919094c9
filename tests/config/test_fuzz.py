"""Whatever a user writes, loading and planning end in a Config or a ConfigError, never a crash."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhw.config import load_config_dict
from rlhw.errors import ConfigError
from rlhw.placement import parse_ranks, plan

KEYS = [
    "num_nodes",
    "node_groups",
    "component_placement",
    "label",
    "node_ranks",
    "accelerators_per_node",
    "env_configs",
    "env_vars",
    "python_interpreter_path",
    "hardware",
    "type",
    "configs",
    "robot_ip",
    "node_rank",
    "camera_serials",
    "serial",
    "controller",
    "realtime",
    "node_group",
    "placement",
    "Franka",
    "RealSense",
    "learner",
    "env",
    "node",
    "cluster",
    "a,b",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "0-3",
            "all",
            "0-1:0-3,4",
            "3-1",
            "Franka",
            "RealSense",
            "node",
            "10.0.0.1",
            "enforce",
            "/usr/bin/python3",
            "",
            ",",
        ]
    ),
    st.text(max_size=6),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from(KEYS), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), st.integers(1, 20))
def test_random_cluster_sections_load_or_raise_config_error(cluster, num_nodes):
    cluster.setdefault("num_nodes", num_nodes)
    try:
        cfg = load_config_dict({"cluster": cluster})
    except ConfigError as e:
        assert e.message and "\n" not in str(e)
        return
    try:
        plan(cfg.cluster)
    except ConfigError as e:
        assert e.message


@settings(max_examples=100, deadline=None)
@given(values)
def test_random_rank_lists_parse_or_raise_config_error(value):
    try:
        ranks = parse_ranks(value)
    except ConfigError:
        return
    assert list(ranks) == sorted(set(ranks))


rank_text = st.one_of(
    st.integers(-1, 8),
    st.lists(st.integers(0, 8), min_size=1, max_size=3),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 8), st.integers(0, 8)),
)
placement_text = st.lists(
    st.builds(
        lambda r, p: r if p is None else f"{r}:{p}",
        st.one_of(
            st.just("all"),
            st.integers(0, 12).map(str),
            st.builds(lambda a, n: f"{a}-{a + n}", st.integers(0, 12), st.integers(0, 12)),
        ),
        st.one_of(
            st.none(),
            st.integers(0, 20).map(str),
            st.builds(lambda a, n: f"{a}-{a + n}", st.integers(0, 20), st.integers(0, 20)),
        ),
    ),
    min_size=1,
    max_size=3,
).map(",".join)


@st.composite
def ascending_placement(draw):
    """Mostly well-formed placements (ascending resources, some explicit process ranks) so that
    many plans succeed and the planner's own rules are exercised, not just the parser's."""
    if draw(st.integers(0, 5)) == 0:
        return "all" if draw(st.booleans()) else f"all:0-{draw(st.integers(0, 20))}"
    start, parts, proc = draw(st.integers(0, 3)), [], 0
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 4))
        res = f"{start}-{start + n - 1}"
        start += n + draw(st.integers(0, 2))
        if draw(st.booleans()):
            count = draw(st.sampled_from([n, 2 * n, max(1, n // 2), 1]))
            parts.append(f"{res}:{proc}-{proc + count - 1}")
            proc += count
        else:
            parts.append(res)
            proc += n
    return ",".join(parts)


@st.composite
def plausible_clusters(draw):
    num_nodes = draw(st.integers(1, 8))
    labels = draw(st.lists(st.sampled_from(["a", "b", "arm", "cam"]), max_size=3, unique=True))
    groups = []
    for label in labels:
        lo = draw(st.integers(0, num_nodes - 1))
        hi = draw(st.integers(lo, num_nodes - 1 + draw(st.integers(0, 1))))  # sometimes one too many
        g = {"label": label, "node_ranks": draw(st.one_of(st.just(f"{lo}-{hi}"), rank_text))}
        inside = st.integers(lo, hi) if draw(st.integers(0, 7)) else st.integers(0, 8)
        if label == "arm":
            g["hardware"] = {
                "type": "Franka",
                "configs": [
                    {"robot_ip": f"10.0.0.{i}", "node_rank": draw(inside)} for i in range(draw(st.integers(1, 3)))
                ],
            }
        elif label == "cam":
            g["hardware"] = {
                "type": "RealSense",
                "configs": [{"serial": str(i), "node_rank": draw(inside)} for i in range(2)],
            }
        else:
            g["accelerators_per_node"] = draw(st.one_of(st.none(), st.integers(0, 4)))
        groups.append(g)
    placement = {}
    for name in draw(st.lists(st.sampled_from(["learner", "env", "agent"]), min_size=1, max_size=3, unique=True)):
        group = draw(st.sampled_from(labels + ["node", None]))
        entry = {"placement": draw(st.one_of(ascending_placement(), placement_text))}
        if group is not None:
            entry["node_group"] = group
        placement[name] = entry if draw(st.booleans()) else [entry, dict(entry)]
    return {"num_nodes": num_nodes, "node_groups": groups, "component_placement": placement}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plausible_clusters(), st.one_of(st.none(), st.dictionaries(st.integers(0, 7), st.integers(0, 3), max_size=8)))
def test_plausible_clusters_plan_or_raise_config_error(cluster, detected):
    try:
        cfg = load_config_dict({"cluster": cluster})
        detected = (
            {k: v for k, v in (detected or {}).items() if k < cfg.cluster.num_nodes} if detected is not None else None
        )
        placements = plan(cfg.cluster, detected)
    except ConfigError as e:
        assert e.message and "\n" not in str(e)
        return
    for records in placements.values():  # a plan that succeeds is self-consistent
        assert [p.rank for p in records] == list(range(len(records)))
        assert all(p.world_size == len(records) and 0 <= p.local_rank < p.local_world_size for p in records)
        assert all(0 <= p.node_rank < cfg.cluster.num_nodes for p in records)
