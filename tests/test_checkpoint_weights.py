"""Weights files: tied tensors written once, weights that are views of one flat buffer (cuDNN's LSTM on
the GPU) written at all, and files of safetensors' own ``save_model`` still loading."""

from __future__ import annotations

import torch
from safetensors import safe_open
from safetensors.torch import save_model
from torch import nn

from infolm.training.checkpoint import load_weights_file, save_weights


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(7, 3)
        self.decoder = nn.Linear(3, 7)
        self.decoder.weight = self.embedding.weight


class FlatViews(nn.Module):
    """Two parameters whose data are views of one buffer, as cuDNN's flatten_parameters leaves them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(4, 3))
        self.b = nn.Parameter(torch.randn(5))
        flat = torch.cat([self.a.data.reshape(-1), self.b.data])
        self.a.data = flat[:12].view(4, 3)
        self.b.data = flat[12:]


def test_flat_buffer_views_save_and_load(tmp_path):
    torch.manual_seed(0)
    model = FlatViews()
    assert model.a.untyped_storage().data_ptr() == model.b.untyped_storage().data_ptr()
    save_weights(model, tmp_path / "m.safetensors")
    other = FlatViews()
    assert load_weights_file(other, tmp_path / "m.safetensors") == []
    assert torch.equal(other.a, model.a) and torch.equal(other.b, model.b)


def test_tied_weights_written_once_and_restored(tmp_path):
    torch.manual_seed(0)
    model = Tied()
    save_weights(model, tmp_path / "m.safetensors")
    with safe_open(str(tmp_path / "m.safetensors"), framework="pt") as handle:
        assert sorted(handle.keys()) == ["decoder.bias", "embedding.weight"]
        assert handle.metadata()["decoder.weight"] == "embedding.weight"
    other = Tied()
    assert load_weights_file(other, tmp_path / "m.safetensors") == []
    assert torch.equal(other.decoder.weight, model.embedding.weight)
    assert other.decoder.weight is other.embedding.weight
    assert torch.equal(other.decoder.bias, model.decoder.bias)


def test_files_of_safetensors_save_model_load(tmp_path):
    torch.manual_seed(1)
    model = Tied()
    save_model(model, str(tmp_path / "old.safetensors"))
    other = Tied()
    assert load_weights_file(other, tmp_path / "old.safetensors") == []
    assert torch.equal(other.embedding.weight, model.embedding.weight)
    assert torch.equal(other.decoder.bias, model.decoder.bias)
