"""Each rank's terms draw from streams of their own under ``torchrun``: two ranks draw different numbers
for a term (the rows they hold are different examples), and rank 0 draws what one process draws."""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch
import torch.distributed as dist

from infolm.objectives.base import Batch, Composite, Objective
from tests.two_ranks import run_on_two_ranks


@dataclasses.dataclass
class SamplerConfig:
    weight: float = 1.0  # multiplier in the Composite


class Sampler(Objective):
    """A term whose batch transform replaces the inputs by draws from torch's global generator."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SamplerConfig()

    def transform_batch(self, batch: Batch) -> Batch:
        return Batch(torch.randint(0, 1000, batch.inputs.shape), batch.targets)


def draws(rank: int | None = None, steps: int = 3) -> torch.Tensor:
    """What the term ``sampler`` draws over ``steps`` batches on its own stream of run seed 7."""
    from infolm.objectives.own_streams import OwnStreams

    objective = OwnStreams(Composite({"sampler": Sampler()}), seed=7, rank=rank)
    batch = Batch(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))
    torch.manual_seed(0)  # the global generator, which the stream leaves alone
    return torch.stack([objective.transform_batch(batch).inputs for _ in range(steps)])


def rank_work(rank: int) -> torch.Tensor:
    return draws()  # the rank from the process group


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[torch.Tensor]:
    return run_on_two_ranks(tmp_path_factory.mktemp("ranks"), rank_work)


def test_rank_zero_keeps_the_single_process_seed():
    from infolm.objectives.own_streams import stream_seed

    assert stream_seed(7, "sampler") == zlib.crc32(b"7:sampler")  # the seed before ranks entered it
    assert stream_seed(7, "sampler", rank=0) == stream_seed(7, "sampler")
    assert len({stream_seed(7, "sampler", rank=r) for r in range(8)}) == 8
    assert torch.equal(draws(rank=0), draws())


@pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")
def test_two_ranks_draw_different_streams_and_rank_zero_the_single_process_one(two_ranks):
    first, second = two_ranks
    single = draws()
    assert torch.equal(first, single)
    assert not torch.equal(second, first)
    assert torch.equal(second, draws(rank=1))
    for step in range(len(first)):  # each step's draws differ, not only the first
        assert not torch.equal(second[step], first[step])
