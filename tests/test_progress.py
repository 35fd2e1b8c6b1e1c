"""The progress line: its content, its rate limit, and that training prints it on stderr when stdout is not a
terminal."""

from __future__ import annotations

import io
import json
import re

from infolm.progress import ProgressLine, eta_seconds, format_duration
from tests.conftest import run_cli, run_in_process


def test_eta_and_durations():
    assert eta_seconds(done=30, total=130, initial=10, elapsed=20.0) == 100.0  # 1 step/s, 100 left
    assert eta_seconds(done=10, total=130, initial=10, elapsed=5.0) is None  # no rate yet
    assert eta_seconds(done=5, total=None, initial=0, elapsed=5.0) is None
    assert [format_duration(s) for s in (42.2, 396, 3720)] == ["42s", "6m36s", "1h02m"]


def test_one_line_per_interval_with_tokens_per_second_and_eta():
    now = [0.0]
    out = io.StringIO()
    line = ProgressLine("train runs/x", total=100, initial=0, interval=30.0, stream=out, clock=lambda: now[0])
    for step in range(1, 51):
        now[0] = step * 1.0  # one step per second, 700 tokens per step
        line.update(step, tokens=700, epoch=0, loss=5.8123)
    lines = out.getvalue().splitlines()
    assert lines == ["infolm train runs/x: step 30/100 (30.0%), epoch 0, loss 5.8123, 700 tokens/s, ETA 1m10s"]


def test_training_reports_progress_on_stderr_when_stdout_is_not_a_terminal(tmp_path):
    result = run_cli(
        "train",
        "configs/tiny.yaml",
        f"run.dir={tmp_path}",
        "train.max_steps=6",
        "--json",
        env={"INFOLM_PROGRESS_SECONDS": "0"},
    )
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)  # stdout holds only the summary
    lines = result.stderr.strip().splitlines()
    pattern = r"infolm train .+: step (\d)/6 \(\d+\.\d%\), epoch 0, loss \d+\.\d{4}, [\d,]+ tokens/s(, ETA \d+s)?"
    assert [int(re.fullmatch(pattern, line).group(1)) for line in lines] == [1, 2, 3, 4, 5, 6]


def test_long_evaluations_report_their_passes(tmp_path):
    args = ("train", "configs/tiny.yaml", f"run.dir={tmp_path}", "train.max_steps=2", "train.eval_every=2")
    trained = run_in_process(*args)
    assert trained.returncode == 0, trained.stderr
    result = run_cli(
        "evaluate",
        str(tmp_path),
        "--mc-dropout",
        "2",
        "--mc-tune-tokens",
        "300",
        "--json",
        env={"INFOLM_PROGRESS_SECONDS": "0"},
    )
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    from infolm.evaluation.mc_dropout import MCDropoutGrid

    passes = len(MCDropoutGrid().rate_scales) + 2  # one per rate scale on valid, then valid and test
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"infolm evaluate (MC dropout): pass {passes}/{passes} (100.0%), stage test")
    assert [int(re.search(rf"pass (\d+)/{passes}", line).group(1)) for line in lines] == list(range(1, passes + 1))
