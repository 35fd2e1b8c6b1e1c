"""Objective terms on random streams of their own: their draws leave torch's global generator alone."""

from __future__ import annotations

import torch


def test_own_streams_keep_noisings_draws_off_the_global_generator(small_corpus, drawing_term):
    from infolm.objectives.base import Batch, Composite, build_objective
    from infolm.objectives.own_streams import OwnStreams
    from tests.conftest import tiny_model

    model = tiny_model("lstm", len(small_corpus.vocab))
    noising = {"noising": {"gamma0": 0.5, "mode": "unigram"}}
    tokens = small_corpus.stream("train")[:81]
    batch = Batch(inputs=tokens[:-1].view(4, 20), targets=tokens[1:].view(4, 20))

    def noised(objective: Composite) -> tuple[torch.Tensor, torch.Tensor]:
        objective.setup(small_corpus, model)
        before = torch.get_rng_state()
        inputs = objective.transform_batch(batch).inputs
        return inputs, before

    torch.manual_seed(0)
    plain, before = noised(build_objective(noising))
    assert not torch.equal(torch.get_rng_state(), before)  # noising draws from the global generator
    assert not torch.equal(plain, batch.inputs)
    torch.manual_seed(0)
    alone, before = noised(OwnStreams(build_objective(noising), seed=3))
    assert torch.equal(torch.get_rng_state(), before)  # with a stream of its own, it does not
    torch.manual_seed(0)
    after_another, _ = noised(OwnStreams(build_objective({"draws": {}, **noising}), seed=3))
    assert torch.equal(after_another, alone)  # a term before it draws from its own stream too
    assert not torch.equal(alone, batch.inputs)
