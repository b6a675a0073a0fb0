"""R3 (issue 16): a switch whose slot pool (``netco switch --slots``) is smaller than the
program's P4Info says refuses the job entries that leave it, and the controller's one-line
error names the switch's pool and the slot range (before: installed, then failing at run
time, or a bare "1 of 16 updates failed")."""

from __future__ import annotations

from control_plane.cli.main import main
from host.softswitch.switch import SoftSwitch
from tests.support.netfile import one_switch_net

JOBS = ["{name: a, id: 4, members: [h1, h2], num_slots: 40}",
        "{name: b, id: 5, members: [h1, h2], num_slots: 40}"]


def test_a_job_beyond_the_switch_pool_is_refused_naming_the_pool(tmp_path, capsys):
    sw = SoftSwitch(pool_slots=64)
    try:
        addr = sw.serve("127.0.0.1:0")
        net = tmp_path / "net.yaml"
        net.write_text(one_switch_net(addr, JOBS))
        assert main(["controller", "apply", str(net), "--timeout", "10"]) == 3
        err = capsys.readouterr().err
        line = [x for x in err.splitlines() if "s1:" in x and "failed" in x]
        assert line, err
        assert "slots 40..79 leave the switch's pool of 64 slots" in line[0]
        assert "set_job.slot_base" in line[0]
    finally:
        sw.stop()
