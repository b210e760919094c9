"""The `rlhw` dispatcher: lazy subcommands, flags and overrides in any order, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlhw.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SIM_REACH = str(ROOT / "configs" / "sim_reach.yaml")


def test_an_override_after_a_flag_is_applied(capsys):
    assert main(["placement", SIM_REACH, "--dry-run", "cluster.num_nodes=0"]) == 2
    assert "cluster.num_nodes" in capsys.readouterr().err


def test_an_override_before_a_flag_is_applied(capsys):
    assert main(["placement", SIM_REACH, "cluster.num_nodes=0", "--dry-run"]) == 2
    assert "cluster.num_nodes" in capsys.readouterr().err


def test_flags_and_overrides_in_any_order_give_the_same_plan(capsys):
    assert main(["placement", "--json", SIM_REACH, "--dry-run", "cluster.num_nodes=2"]) == 0
    first = capsys.readouterr().out
    assert main(["placement", SIM_REACH, "cluster.num_nodes=2", "--dry-run", "--json"]) == 0
    assert capsys.readouterr().out == first and '"num_nodes":2' in first.replace(" ", "")


def test_an_unknown_subcommand_lists_the_known_ones(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "placement" in err and "smoke-test" in err


def test_an_unknown_flag_names_itself_and_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["placement", SIM_REACH, "--bogus"])
    assert e.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_placement_dry_run_imports_neither_ray_nor_torch_nor_other_subcommands():
    code = (
        "import sys; from rlhw.cli.main import main; rc = main(['placement', %r, '--dry-run', '--json']);"  # noqa: UP031  (a code template: braces would need escaping)
        "bad = [m for m in ('ray', 'torch', 'mujoco', 'grpc', 'rlhw.cli.train', 'rlhw.cli.smoke_test') if m in sys.modules];"
        "print('LOADED', bad); sys.exit(rc)" % SIM_REACH
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout
