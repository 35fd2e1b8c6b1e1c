"""Fine-tuning a pretrained encoder (Kong et al. Sec. 5.3; IMM App. D.2): which text IMM's bigram reads,
which pretraining checkpoint is loaded, which weights a checkpoint must hold, which parameters decay."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from infolm.cli.main import main
from infolm.config import load_config
from infolm.tasks.classification import Classification
from infolm.tasks.masked_lm import MaskedLM
from tests.conftest import ROOT

TINY = ["model.dim=16", "model.layers=1", "model.heads=2", "model.ff_dim=32", "model.max_len=32"]


def run_main(*args: str) -> tuple[int, str]:
    """The CLI in this process: exit code and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, err.getvalue()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, ptb_slice_files) -> Path:
    """A two-step masked-lm run on a PTB slice plus task.extra_train (symbols ``x0`` .. ``x999``, a text
    PTB's slice does not spell), with step checkpoints 1 and 2 and its best/."""
    run_dir = tmp_path_factory.mktemp("pretrained") / "run"
    data = [f"data.{key}={value}" for key, value in ptb_slice_files.items()]
    code, err = run_main(
        "train",
        str(ROOT / "configs/ptb/bert-mlm.yaml"),
        f"run.dir={run_dir}",
        *data,
        "task.max_len=24",
        "task.vocab_size=300",
        "task.extra_train=[uniform-symbols-1000]",
        "train.max_steps=2",
        "train.eval_every=1",
        "train.checkpoint_every=1",
        "train.progress=false",
        *TINY,
    )
    assert code == 0, err
    return run_dir


def cola_settings(cola_task_files: dict[str, str], run_dir: Path, init_from: Path) -> list[str]:
    data = [f"data.{key}={value}" for key, value in cola_task_files.items()]
    return [*data, f"run.dir={run_dir}", f"run.init_from={init_from}", "task.max_len=32", *TINY]


def test_imm_bigram_reads_the_pretraining_text_extra_train_included(pretrained, cola_task_files, tmp_path):
    """App. D.2: the restricted bigram is built on the text the encoder was pretrained on: the pretraining
    run's data *and* its task.extra_train, exactly as the masked-lm task of that run read them."""
    config = load_config(ROOT / "configs/cola/finetune-imm.yaml", cola_settings(cola_task_files, tmp_path, pretrained))
    restricted = Classification.load_data(config).restricted_text()
    pretraining = load_config(pretrained / "config.yaml")
    pretraining.run.dir = str(pretrained)
    text = MaskedLM.load_data(pretraining).train
    assert torch.equal(restricted.rows, text.rows) and torch.equal(restricted.lengths, text.lengths)
    alone = load_config(pretrained / "config.yaml", ["task.extra_train=[]", f"run.dir={pretrained}"])
    main_text = MaskedLM.load_data(alone).train
    vocab_size = int(text.rows.max()) + 1
    only_extra = (restricted.counts(vocab_size) > 0) & (main_text.counts(vocab_size) == 0)
    assert bool(only_extra.any())  # subwords of the symbols, absent from PTB's slice, are in the bigram's text


def fine_tuned_weights(cola_task_files, run_dir: Path, init_from: Path, *extra: str) -> dict[str, torch.Tensor]:
    """The weights of a one-step fine-tuning at lr 0 (so: the weights it started from)."""
    settings = [*cola_settings(cola_task_files, run_dir, init_from), "optim.lr=0", "train.max_steps=1", *extra]
    code, err = run_main("train", str(ROOT / "configs/cola/finetune-base.yaml"), *settings, "train.progress=false")
    assert code == 0, err
    from infolm.training.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None
    return load_file(checkpoint / "model.safetensors")


def test_fine_tuning_starts_from_the_last_pretraining_checkpoint_unless_told_best(
    pretrained, cola_task_files, tmp_path
):
    """Kong et al. fine-tune the final pretraining checkpoint: best/ is chosen by the full-softmax MLM
    loss, which contrastive encoders (mlm-nce, dim) never optimise. task.init_checkpoint=best keeps it."""
    source = tmp_path / "pretrained"
    shutil.copytree(pretrained, source)
    last = load_file(source / "checkpoints" / "step-00000002" / "model.safetensors")
    best = {name: tensor + 1.0 for name, tensor in last.items()}  # a best/ unlike the last step, whatever it was
    save_file(best, source / "checkpoints" / "best" / "model.safetensors", metadata={"format": "pt"})
    default = fine_tuned_weights(cola_task_files, tmp_path / "last", source)
    assert all(torch.equal(default[name], last[name]) for name in last)
    chosen = fine_tuned_weights(cola_task_files, tmp_path / "best", source, "task.init_checkpoint=best")
    assert all(torch.equal(chosen[name], best[name]) for name in best)
    code, err = run_main(
        "train", str(ROOT / "configs/cola/finetune-base.yaml"), *cola_settings(cola_task_files, tmp_path / "x", source),
        "task.init_checkpoint=latest",
    )  # fmt: skip
    assert code == 2 and "task.init_checkpoint must be one of last, best; got 'latest'" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_checkpoint_of_another_optimizer_layout_is_one_line_on_resume(ptb_slice_files, tmp_path):
    """A run checkpointed when the encoder's parameters were one optimizer group (before biases and
    LayerNorm weights left weight decay) is refused on resume, in one line, not loaded into two groups."""
    run_dir = tmp_path / "run"
    data = [f"data.{key}={value}" for key, value in ptb_slice_files.items()]
    settings = [f"run.dir={run_dir}", *data, "task.max_len=24", "task.vocab_size=300", *TINY, "train.progress=false"]
    code, err = run_main("train", str(ROOT / "configs/ptb/bert-mlm.yaml"), *settings, "train.max_steps=1")
    assert code == 0, err
    (checkpoint,) = (run_dir / "checkpoints").glob("step-*")
    state = torch.load(checkpoint / "trainer.pt", weights_only=True)
    decayed, exempt = state["optimizers"][0]["param_groups"]
    decayed["params"] = decayed["params"] + exempt["params"]  # the earlier layout: one group of every parameter
    state["optimizers"][0]["param_groups"] = [decayed]
    torch.save(state, checkpoint / "trainer.pt")
    code, err = run_main("train", str(ROOT / "configs/ptb/bert-mlm.yaml"), *settings, "train.max_steps=2")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"checkpoint {checkpoint} holds 1 optimizer parameter group(s), this model has 2" in err


def test_a_pretrained_checkpoint_without_weights_the_model_needs_is_refused(pretrained, cola_task_files, tmp_path):
    """A fine-tuned model of two layers from a one-layer encoder would start layer 2 at random: refused in one
    line naming what is missing. The classification head, new in fine-tuning, may be missing."""
    settings = [*cola_settings(cola_task_files, tmp_path / "deeper", pretrained), "model.layers=2"]
    code, err = run_main("train", str(ROOT / "configs/cola/finetune-base.yaml"), *settings)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "lacks weights the model needs: layers.1.attention_norm.bias, layers.1.attention_norm.weight" in err
    assert "(12 in all)" in err and "classifier" not in err  # a layer: 6 weights and 6 biases
    assert not (tmp_path / "deeper").exists()
