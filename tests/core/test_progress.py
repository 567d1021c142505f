"""Progress of a long call: a line per stage in a log, never silent for longer than EVERY_S; a bar on a terminal."""
from __future__ import annotations

import io
import re
import time

from costlearn.core.progress import EVERY_S, LogBar, ProgressLog, elapsed_text, progress_bar


def test_a_log_gets_each_stage_and_a_line_at_least_every_every_s_while_one_stage_lasts():
    log = io.StringIO()
    with ProgressLog(log, every_s=0.2) as progress:
        progress("fold 1 of 2")
        time.sleep(0.9)                                  # one stage far longer than every_s
        progress("fold 2 of 2")
    lines = log.getvalue().splitlines()
    assert re.fullmatch(r"\[0s\] fold 1 of 2", lines[0]) and lines[-1].endswith("] fold 2 of 2")
    still = [ln for ln in lines if ln.endswith("] still: fold 1 of 2")]
    assert 2 <= len(still) <= 5, lines
    assert EVERY_S < 30                                  # a log reader never waits 30 s for a line


def test_a_counted_loops_bar_in_a_log_writes_at_most_and_at_least_every_every_s_and_when_it_closes():
    log = io.StringIO()
    bar = LogBar(100, "collect dev", "s", log, every_s=0.25)
    for i in range(10):                                  # refreshed far more often than every_s
        bar.n = i
        bar.set_postfix_str(f"problems={i}")
        time.sleep(0.02)
    time.sleep(0.6)                                      # then nothing for a while: the thread writes
    bar.close()
    lines = log.getvalue().splitlines()
    assert 2 <= len(lines) <= 5, lines
    assert lines[-1].endswith("] collect dev: 9/100 s, problems=9")
    assert progress_bar(10, "x", "it", stream=io.StringIO()).__class__ is LogBar     # not a terminal: lines


def test_on_a_terminal_each_stage_shows_above_a_bar_that_is_removed_at_the_end():
    screen = io.StringIO()
    with ProgressLog(screen, every_s=0.2, terminal=True) as progress:
        assert progress.bar is not None
        progress("fitting xgboost")
        time.sleep(0.3)
    assert "fitting xgboost\n" in screen.getvalue() and progress.bar is None


def test_elapsed_time_reads_as_a_log_shows_it():
    assert [elapsed_text(s) for s in (0.4, 59, 185, 3725)] == ["0s", "59s", "3m05s", "1h02m"]
