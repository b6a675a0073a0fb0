"""The controller's live telemetry (control_plane/telemetry.py): the watch table rendered from
snapshots, rates between two of them, the refresh loop on a terminal and into a log, and the
Prometheus collector. (Counters read from a real switch:
tests/host/softswitch/test_softswitch_metrics.py.)"""

from __future__ import annotations

import io

import pytest
from prometheus_client.parser import text_string_to_metric_families

from control_plane.telemetry import (
    JobCounters,
    Snapshot,
    SnapshotCollector,
    SwitchState,
    WorkerStats,
    rates,
    render_table,
    watch,
)
from host.exporter import render
from host.protocol.layout import COORDS_PER_PACKET


def snap(t: float, contributions: int, results: int, resent: int, drops: dict | None = None,
         reachable: bool = True, trips: int | None = None) -> Snapshot:
    sw = SwitchState("s1", "127.0.0.1:9559", reachable, None if reachable else "s1: no answer",
                     drops or {}, trips)
    jobs = (JobCounters("train", 7, "s1", 0, contributions, results, resent),
            JobCounters("eval", 9, "s1", 1, None, None, None))
    return Snapshot(t, (sw,), jobs)


def test_table_shows_every_counter_of_a_snapshot():
    lines = render_table(snap(100.0, 4000, 1000, 3, {"DUPLICATE": 5, "STALE": 1}))
    text = "\n".join(lines)
    header = next(line for line in lines if line.startswith("job"))
    assert header.split() == ["job", "id", "switch", "contributions", "results", "resent",
                              "contrib", "rate", "result", "rate", "goodput"]
    row = next(line for line in lines if line.startswith("train")).split()
    assert row == ["train", "7", "s1", "4000", "1000", "3", "-", "-", "-"]   # no rates yet
    assert next(line for line in lines if line.startswith("eval")).split()[3:6] == ["-", "-", "-"]
    assert "DUPLICATE" in text and "STALE" in text
    assert [line.split() for line in lines if "127.0.0.1:9559" in line] == \
        [["s1", "127.0.0.1:9559", "yes", "-"]]


def test_columns_line_up():
    lines = render_table(snap(100.0, 4000, 1000, 3))
    i = next(k for k, line in enumerate(lines) if line.startswith("job"))
    header, rule, row = lines[i], lines[i + 1], lines[i + 2]
    starts = [k for k in range(len(rule)) if rule[k] == "-" and (k == 0 or rule[k - 1] == " ")]
    assert len(starts) == 9
    for k in starts:
        assert header[k] != " " and row[k] != " "            # every cell starts under its rule
        assert k == 0 or (header[k - 1] == " " and row[k - 1] == " ")


def test_rates_and_goodput_between_two_snapshots():
    a = snap(100.0, 4000, 1000, 3, {"DUPLICATE": 5})
    b = snap(102.0, 6000, 1500, 5, {"DUPLICATE": 9, "STALE": 2})
    r = rates(a, b)[("s1", "train")]
    assert (r.contributions, r.results, r.resent) == (1000.0, 250.0, 1.0)
    assert r.goodput == 250.0 * COORDS_PER_PACKET
    assert ("s1", "eval") not in rates(a, b)           # counters unknown
    assert rates(b, a) == {}                             # time went backwards
    row = next(line for line in render_table(b, a) if line.startswith("train"))
    assert "1.0 kpkt/s" in row and "250 pkt/s" in row
    assert f"{250 * COORDS_PER_PACKET / 1e3:.1f} kcoord/s" in row
    drops = {line.split()[1]: line.split()[2:] for line in render_table(b, a) if line.startswith("s1  ")
             and len(line.split()) >= 4 and line.split()[1].isupper()}
    assert drops["DUPLICATE"] == ["9", "2", "pkt/s"] and drops["STALE"] == ["2", "1", "pkt/s"]


def test_a_counter_reset_gives_no_rate():
    r = rates(snap(100.0, 4000, 1000, 3), snap(101.0, 10, 5, 0))
    assert r == {}


def test_unreachable_switch_is_named():
    text = "\n".join(render_table(snap(1.0, 0, 0, 0, reachable=False)))
    assert "NO" in text and "s1: no answer" in text and "no drops" in text


def test_watch_into_a_log_prints_plain_blocks():
    snaps = iter([snap(100.0, 0, 0, 0), snap(101.0, 512, 128, 0), snap(102.0, 1024, 256, 0)])
    out = io.StringIO()
    slept = []
    n = watch(lambda: next(snaps), 1.0, rounds=3, out=out, tty=False, sleep=slept.append)
    text = out.getvalue()
    assert n == 3 and slept == [1.0, 1.0]
    assert "\x1b" not in text
    blocks = [b for b in text.split("netco switch counters at ") if b]
    assert len(blocks) == 3 and all(b.endswith("no drops\n\n") for b in blocks)
    assert "128 pkt/s" in text   # the second refresh has rates


def test_watch_on_a_terminal_redraws_in_place():
    out = io.StringIO()
    n = watch(lambda: snap(100.0, 1, 1, 0), 0.5, rounds=2, out=out, tty=True, sleep=lambda s: None)
    assert n == 2 and out.getvalue().count("\x1b[H\x1b[2J") == 2


def test_watch_stops_cleanly_on_ctrl_c():
    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    assert watch(lambda: snap(1.0, 0, 0, 0), 1.0, out=io.StringIO(), tty=False, sleep=interrupted) == 1
    with pytest.raises(ValueError, match="interval"):
        watch(lambda: snap(1.0, 0, 0, 0), 0, out=io.StringIO())


def test_collector_exports_the_snapshot_in_the_prometheus_text_format():
    text = render([SnapshotCollector(lambda: snap(1.0, 4000, 1000, 3, {"DUPLICATE": 5}))])
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    job = (("job", "train"), ("job_id", "7"), ("switch", "s1"))
    assert samples[("netco_job_contributions_total", job)] == 4000
    assert samples[("netco_job_results_total", job)] == 1000
    assert samples[("netco_job_resent_total", job)] == 3
    assert samples[("netco_switch_drops_total", (("reason", "DUPLICATE"), ("switch", "s1")))] == 5
    assert samples[("netco_switch_reachable", (("switch", "s1"),))] == 1
    assert not [k for k in samples if ("job", "eval") in k[1]]   # unknown counters are left out


def test_rate_limit_trips_are_shown_logged_once_and_exported(caplog):
    # issue 33 (4): ingress.rate_limit.trips in the switch table, one log line (and one line in
    # the block) for each refresh in which it grew, and a metric
    lines = render_table(snap(1.0, 0, 0, 0, trips=2))
    assert [line.split() for line in lines if "127.0.0.1:9559" in line] == \
        [["s1", "127.0.0.1:9559", "yes", "2"]]
    snaps = iter([snap(1.0, 0, 0, 0, trips=0), snap(2.0, 0, 0, 0, trips=0),
                  snap(3.0, 0, 0, 0, {"RATE_LIMITED": 99}, trips=1), snap(4.0, 0, 0, 0, trips=1)])
    out = io.StringIO()
    with caplog.at_level("WARNING", logger="control_plane.telemetry"):
        watch(lambda: next(snaps), 1.0, rounds=4, out=out, tty=False, sleep=lambda s: None)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and logged[0].startswith("s1: the rate limit held 1 more source(s) (1 so far)")
    assert out.getvalue().count("the rate limit held") == 1
    text = render([SnapshotCollector(lambda: snap(1.0, 0, 0, 0, trips=3))])
    samples = {(s.name, tuple(s.labels.items())): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("netco_switch_rate_limit_trips_total", (("switch", "s1"),))] == 3
    text = render([SnapshotCollector(lambda: snap(1.0, 0, 0, 0))])    # a program without it
    assert not [s for fam in text_string_to_metric_families(text) for s in fam.samples
                if s.name == "netco_switch_rate_limit_trips_total"]


def test_metrics_arguments_have_help_and_defaults():
    import argparse

    from host.exporter import add_metrics_arguments

    p = argparse.ArgumentParser()
    add_metrics_arguments(p, "the switch's counters")
    assert vars(p.parse_args([])) == {"metrics_port": None, "metrics_address": "127.0.0.1"}
    assert p.parse_args(["--metrics-port", "9100"]).metrics_port == 9100
    assert all(a.help for a in p._actions)
    assert "the switch's counters" in p.format_help()


def test_table_shows_the_workers_and_their_goodput():
    def with_workers(t: float, coords: int, packets: int) -> Snapshot:
        base = snap(t, 0, 0, 0)
        ws = tuple(WorkerStats(f"http://127.0.0.1:{9100 + r}/metrics", 7, r, packets, r, coords,
                               0, 0) for r in range(2))
        return Snapshot(t, base.switches, base.jobs, ws, {"http://127.0.0.1:9102/metrics": "refused"})

    a, b = with_workers(10.0, 1000, 10), with_workers(12.0, 5000, 30)
    lines = render_table(b, a)
    i = next(k for k, line in enumerate(lines) if line.startswith("job  rank"))
    assert lines[i].split() == ["job", "rank", "packets", "retransmits", "coordinates", "packet",
                                "rate", "goodput"]
    assert lines[i + 2].split() == ["7", "0", "30", "0", "5000", "10", "pkt/s", "2.0", "kcoord/s"]
    assert lines[i + 3].split()[:4] == ["7", "1", "30", "1"]
    assert "worker metrics http://127.0.0.1:9102/metrics: refused" in lines
    first = render_table(a)
    assert next(line for line in first if line.startswith("7    0")).split()[-2:] == ["-", "-"]
