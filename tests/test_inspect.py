"""Schedule pictures: the Gantt PNG and the Perfetto trace."""

from __future__ import annotations

import json

import pytest

from mkc.schedule import schedule
from mkc.schedule.inspect import gantt_png, perfetto_trace, trace_events
from taskgraph_fixtures import TINY, decoder_taskgraph, toy_target

pytest.importorskip("matplotlib")
TOY = toy_target(8)


@pytest.fixture(scope="module")
def tg_sched():
    tg = decoder_taskgraph(TOY, **dict(TINY, tiles=24, lm_tiles=16))
    return tg, schedule(tg, TOY, method="list")


def test_gantt_png(tmp_path, tg_sched):
    tg, s = tg_sched
    path = gantt_png(tg, s, tmp_path / "g.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_perfetto_trace(tmp_path, tg_sched):
    tg, s = tg_sched
    doc = json.loads(perfetto_trace(tg, s, tmp_path / "t.json").read_text())
    ev = doc["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X"]
    assert len(slices) == len(tg.tasks)
    threads = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {w for w, q in enumerate(s.queues) if q}
    wo = s.worker_of()
    for e in slices:
        t = e["args"]["task"]
        assert e["tid"] == wo[t] and e["name"] == tg.tasks[t].kind
        assert e["ts"] == pytest.approx(s.start[t], abs=1e-3) and e["dur"] >= 0
        assert e["args"]["layer"] == tg.tasks[t].layer


def test_measured_times_go_through_the_same_writers(tmp_path, tg_sched):
    tg, s = tg_sched
    n = len(tg.tasks)
    start = [2.0 * x for x in s.start]
    end = [2.0 * x for x in s.end]
    workers = [t % 3 for t in range(n)]
    doc = json.loads(perfetto_trace(tg, s, tmp_path / "m.json", start, end, workers, label="measured").read_text())
    assert doc["traceEvents"][0]["args"]["name"] == "measured"
    assert {e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"} == {0, 1, 2}
    gantt_png(tg, s, tmp_path / "m.png", start, end, workers, title="measured")
    assert (tmp_path / "m.png").stat().st_size > 0
    with pytest.raises(ValueError):
        perfetto_trace(tg, s, tmp_path / "x.json", start[:-1])
    assert len(trace_events(tg, start, end, workers, pid=1)) == n + 1 + 2 * 3
