"""`--semantics pollux` (issue 35 part 5): the pollux-fidelity experiment's settings as one named
preset, on simulate and compare and in the Python API."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlsched.api import simulate
from dlsched.core.errors import DlschedError
from dlsched.experiments import pollux_fidelity as pf
from dlsched.sim import pollux as psem


@pytest.mark.parametrize("policy", pf.POLICIES)
def test_preset_is_the_pollux_fidelity_settings(policy):
    """Same runs as the experiment's (its delays and policy config), so the same mean JCT; the
    native defaults differ, so the preset is what makes them equal."""
    ours = simulate("pollux", "pollux-6", policy, semantics="pollux").summary
    exp = simulate("pollux", "pollux-6", policy, start_delay_s=pf.START_DELAY_S,
                   restart_delay_s=pf.RESTART_DELAY_S, policy_config=pf.POLICY_CONFIG).summary
    native = simulate("pollux", "pollux-6", policy).summary
    assert ours["mean_jct_s"] == exp["mean_jct_s"] and ours["makespan_s"] == exp["makespan_s"]
    assert native["mean_jct_s"] != exp["mean_jct_s"]
    # the delays given are the preset's, whatever is passed
    again = simulate("pollux", "pollux-6", policy, semantics="pollux", start_delay_s=0.0, restart_delay_s=5.0)
    assert again.summary["mean_jct_s"] == ours["mean_jct_s"]


def test_policy_config_goes_on_top_of_the_preset():
    got = psem.settings("optimus", {"params": {"optimus": {"remaining": "oracle"}}, "round_s": 120.0})
    assert got == {"round_s": 120.0, "event_rounds": False,
                   "params": {"optimus": {"early_factor": 1.0, "remaining": "oracle"}}}
    assert psem.settings("tiresias") == {"round_s": 60.0, "event_rounds": False}
    assert psem.profile("optimus").round_s == 60.0


def test_other_policies_are_refused():
    with pytest.raises(DlschedError, match="--semantics pollux runs tiresias, optimus"):
        simulate("pollux", "pollux-6", "fifo", semantics="pollux")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *args], capture_output=True, text=True)


def test_cli_simulate_and_compare(tmp_path):
    r = _cli("simulate", "-c", "pollux", "-w", "pollux-6", "-p", "tiresias", "--semantics", "pollux",
             "-o", str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    exp = simulate("pollux", "pollux-6", "tiresias", start_delay_s=pf.START_DELAY_S,
                   restart_delay_s=pf.RESTART_DELAY_S, policy_config=pf.POLICY_CONFIG).summary
    got = summary.get("summary", summary)
    assert got["mean_jct_s"] == pytest.approx(exp["mean_jct_s"], rel=1e-12)
    for args, part in [(("compare", "-p", "tiresias,fifo"), "--semantics pollux runs tiresias, optimus"),
                       (("simulate", "-p", "optimus", "--queues", "x.yaml"), "the Pollux simulator has no tenants")]:
        r = _cli(*args, "-c", "pollux", "-w", "pollux-6", "--semantics", "pollux", "-o", str(tmp_path / "x"))
        assert r.returncode == 2 and part in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
