"""A run's weights load whole: a checkpoint that lacks a weight the run's model has is refused with one
line naming it, instead of leaving that weight at its random initial value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tests.conftest import ROOT

DROPPED = "decoder.bias"  # a parameter of the LSTM language model that no other name aliases


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    from infolm.build import train
    from infolm.config import load_config

    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    overrides = [f"run.dir={run_dir}", "train.max_steps=2", "train.eval_every=2", "train.progress=false"]
    train(load_config(ROOT / "configs/tiny.yaml", overrides), overrides)
    return run_dir


def without_one_weight(run_dir: Path, copy: Path) -> Path:
    """A copy of ``run_dir`` whose evaluation weights lack ``DROPPED`` (metadata kept)."""
    from infolm.build import _evaluation_checkpoint

    shutil.copytree(run_dir, copy)
    chosen = _evaluation_checkpoint(copy)
    assert chosen is not None
    path = chosen / "model.safetensors"
    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    assert DROPPED in tensors and DROPPED not in metadata
    del tensors[DROPPED]
    save_file(tensors, str(path), metadata=metadata)
    return copy


def test_a_whole_run_loads_its_saved_weights(tiny_run):
    from infolm.build import _evaluation_checkpoint, load_run, load_run_model
    from infolm.training.checkpoint import load_weights_file

    chosen = _evaluation_checkpoint(tiny_run)
    assert chosen is not None
    with safe_open(str(chosen / "model.safetensors"), framework="pt") as handle:
        saved = handle.get_tensor(DROPPED)
    _, _, model = load_run(tiny_run)
    assert torch.equal(model.state_dict()[DROPPED], saved)
    _, model, checkpoint = load_run_model(tiny_run)
    assert checkpoint == chosen and torch.equal(model.state_dict()[DROPPED], saved)
    assert load_weights_file(model, chosen / "model.safetensors") == []


@pytest.mark.parametrize("loader", ["load_run", "load_run_model"])
def test_a_run_whose_checkpoint_lacks_a_weight_is_refused_naming_it(tiny_run, tmp_path, loader):
    import infolm.build
    from infolm.errors import InfolmError

    broken = without_one_weight(tiny_run, tmp_path / "broken")
    with pytest.raises(InfolmError) as refused:
        getattr(infolm.build, loader)(broken)
    message = str(refused.value)
    assert "\n" not in message
    assert DROPPED in message and "(1 in all)" in message and str(broken) in message
