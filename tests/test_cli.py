"""End-to-end tests of every CLI command on configs/tiny.yaml, and one-line errors on bad input."""

import json

import pytest

from tests.conftest import run_cli, run_cli_concurrently, run_in_process


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    result = run_cli("train", "configs/tiny.yaml", f"run.dir={path}", "train.max_steps=10", "train.eval_every=5")
    assert result.returncode == 0, result.stderr
    return path


def assert_one_line_error(result, fragment):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert fragment in lines[0], lines[0]


def test_train_writes_a_complete_run(run_dir):
    for name in ("config.yaml", "metrics.jsonl", "vocab.json", "checkpoints/best/model.safetensors"):
        assert (run_dir / name).exists(), name
    assert (
        sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step-"))[-1] == "step-00000010"
    )


def test_evaluate_json(run_dir):
    result = run_cli("evaluate", str(run_dir), "--split", "test", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert {"ppl", "nll", "tokens"} <= payload.keys()
    assert payload["tokens"] > 2000 and 1 < payload["ppl"] < 20000


def test_generate_is_seeded(run_dir):
    args = ["generate", str(run_dir), "--prompt", "the company", "--max-tokens", "12", "--top-k", "50", "--seed", "3"]
    first, second = run_cli_concurrently(args, args)  # two processes, one seed
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert first.stdout.startswith("the company")
    assert len(first.stdout.split()) >= 3


def test_info_lists_the_registries():
    result = run_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert "ptb" in payload["datasets"] and "lstm" in payload["models"] and "mle" in payload["objectives"]


def test_ngram_build_and_eval(tmp_path):
    arpa = tmp_path / "bigram.arpa"
    assert run_cli("ngram", "build", "--data", "ptb", "--order", "2", "--out", str(arpa)).returncode == 0
    result = run_cli("ngram", "eval", str(arpa), "--data", "ptb", "--split", "test", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ppl"] == pytest.approx(185.7, abs=0.5)  # IMM paper Table 1: 185.71


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("train", "missing.yaml"), "config file not found"),
        (("train", "configs/tiny.yaml", "train.max_stepz=1"), "unknown config key"),
        (("train", "configs/tiny.yaml", "model.name=gpt5"), "unknown model 'gpt5'"),
        (("train", "configs/tiny.yaml", "objective.fancy.weight=1"), "unknown objective 'fancy'"),
        (("train", "configs/tiny.yaml", "optim.lr=abc"), "optim.lr must be of type float"),
        (("train", "configs/tiny.yaml", "data.bptt=-3"), "data.bptt must be positive"),
        (("train", "configs/tiny.yaml", "model.hidden=big"), "model.hidden must be of type int"),
        (("train", "configs/tiny.yaml", "data.name=nowhere"), "unknown dataset"),
        (("evaluate", "no/such/run"), "not an infolm run directory"),
        (("ngram", "eval", "no/such.arpa"), "no/such.arpa"),
        (("evaluate",), "the following arguments are required"),
    ],
)
def test_bad_input_is_one_line(args, fragment, tmp_path):
    args = tuple(a if a != "missing.yaml" else str(tmp_path / a) for a in args)
    if args[0] == "train":
        args = (*args, f"run.dir={tmp_path / 'run'}")
    result = run_cli(*args)
    assert_one_line_error(result, fragment)


def test_data_files_that_are_missing_empty_or_binary(tmp_path):
    (tmp_path / "ok.txt").write_text("a b\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    base = (
        "train",
        "configs/tiny.yaml",
        f"run.dir={tmp_path / 'run'}",
        "data.name=path",
        f"data.valid={tmp_path / 'ok.txt'}",
        f"data.test={tmp_path / 'ok.txt'}",
    )
    missing, empty, binary = run_cli_concurrently(
        *([*base, f"data.train={tmp_path / name}"] for name in ("nope.txt", "empty.txt", "binary.bin"))
    )
    assert_one_line_error(missing, "not found")
    assert_one_line_error(empty, "is empty")
    assert_one_line_error(binary, "binary")
    assert not (tmp_path / "run").exists()


def test_prompt_with_unknown_word_reads_it_as_unk(run_dir):
    """PTB's vocabulary has <unk>: an unknown prompt word becomes <unk>, with one warning line."""
    args = ["generate", str(run_dir), "--max-tokens", "3", "--seed", "1"]
    result, unk = run_cli_concurrently([*args, "--prompt", "the zzyzzx"], [*args, "--prompt", "the <unk>"])
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        f"infolm: warning: prompt words not in the vocabulary of {run_dir}, read as <unk>: 'zzyzzx'"
    )
    assert result.stdout == unk.stdout
    assert result.stdout.startswith("the <unk> ")


def test_prompt_with_unknown_char_without_unk_is_an_error(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("abc abc\ncab\n" * 20)
    run = tmp_path / "run"
    data = [f"data.{split}={tmp_path / split}.txt" for split in ("train", "valid", "test")]
    trained = run_in_process(
        "train",
        "configs/tiny.yaml",
        f"run.dir={run}",
        "data.name=path",
        "data.level=char",
        *data,
        "train.max_steps=2",
        "train.eval_every=2",
    )
    assert trained.returncode == 0, trained.stderr
    result = run_cli("generate", str(run), "--prompt", "abz", "--max-tokens", "3")
    assert_one_line_error(result, "'z' is not in the vocabulary")


def test_run_dir_from_another_config_is_refused_and_untouched(run_dir):
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    result = run_cli("train", "configs/tiny.yaml", f"run.dir={run_dir}", "model.hidden=48")
    assert_one_line_error(result, "holds a run of another config")
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert before == after


def test_run_dir_that_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("not a directory")
    result = run_cli("train", "configs/tiny.yaml", f"run.dir={target}", "train.max_steps=1")
    assert_one_line_error(result, str(target))
    assert target.read_text() == "not a directory"


def test_damaged_checkpoint_is_a_clear_error(run_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "checkpoints/best/model.safetensors").write_bytes(b"garbage")
    assert_one_line_error(run_cli("evaluate", str(copy)), "cannot load weights")


def test_evaluate_scores_the_whole_split_unless_asked_for_the_training_cut(run_dir):
    """The run trained with data.max_eval_tokens=3000: evaluate scores all of PTB valid; --as-trained
    scores the first lines only and says so on stderr and in the JSON."""
    args = ("evaluate", str(run_dir), "--split", "valid", "--json")
    default, full, cut = run_cli_concurrently([*args], [*args, "--full-splits"], [*args, "--as-trained"])
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout) == json.loads(full.stdout)
    assert json.loads(default.stdout)["tokens"] == 73760  # all of PTB valid, <eos> included
    assert default.stderr == ""
    payload = json.loads(cut.stdout)
    assert payload["tokens"] == payload["kept_tokens"] and 2900 < payload["tokens"] <= 3000
    assert payload["split_tokens"] == 73760 and payload["cut"] is True and payload["max_eval_tokens"] == 3000
    assert f"scored {payload['tokens']} of the 73760 tokens of valid" in cut.stderr


def test_evaluate_mc_dropout_tunes_rate_scale_and_temperature(run_dir):
    result = run_cli("evaluate", str(run_dir), "--mc-dropout", "2", "--mc-tune-tokens", "300", "--json")
    assert result.returncode == 0, result.stderr
    mc = json.loads(result.stdout)["mc_dropout"]
    from infolm.evaluation.mc_dropout import MCDropoutGrid

    grid = MCDropoutGrid()
    assert mc["rate_scale"] in grid.rate_scales and mc["temperature"] in grid.temperatures
    assert grid.rate_scales == (0.2, 0.4, 0.6, 0.8, 1.0)
    assert mc["tuned_on_valid_tokens"] == 300


def test_evaluate_dynamic_bptt_must_be_positive_integers(run_dir):
    result = run_cli("evaluate", str(run_dir), "--dynamic", "--dynamic-bptt", "5,x")
    assert_one_line_error(result, "--dynamic-bptt takes positive integers")


def _actions(parser):
    """Every argparse action of a parser and of its subcommands, with the command's name."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
        else:
            yield parser.prog, action


def test_every_cli_option_has_help_text():
    from infolm.cli.main import make_parser

    actions = list(_actions(make_parser()))
    assert len(actions) > 40
    missing = [f"{prog} {action.dest}" for prog, action in actions if not action.help]
    assert missing == []


def test_copy_task_options_have_help_text():
    from infolm.data import copy_task

    result = run_cli_module("infolm.data.copy_task", "--help")
    assert result.returncode == 0
    for field in ("--length", "--vocab-size", "--train", "--valid", "--test", "--seed"):
        assert f"{field} " in result.stdout
    assert copy_task.CopyTaskConfig().length == 50 and "(default: 50)" in result.stdout


def test_version():
    import infolm

    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"infolm {infolm.__version__}"


def run_cli_module(module, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


def test_overrides_and_options_in_any_order(capsys):
    from infolm.cli.main import parse

    args = parse(["finetune", "c.yaml", "a=1", "--seeds", "1,2", "b=2", "--json", "c=3"])
    assert args.config == "c.yaml" and args.seeds == [1, 2] and args.json
    assert args.overrides == ["a=1", "b=2", "c=3"]  # in the order given
    with pytest.raises(SystemExit) as exit_info:
        parse(["train", "c.yaml", "--json", "a=1", "--bogus"])
    assert exit_info.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["info", "extra"])  # no overrides to take it
