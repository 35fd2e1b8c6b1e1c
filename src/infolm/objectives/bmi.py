"""BMI: the bootstrapped mutual-information regularizer (Cao & Xu, Alg. 1).

Phase I (Sec. 3.1): a discriminator D_theta on max-pooled hidden states phi_omega of consecutive
sentences (S_l, S_{l+1}) versus random pairs (S_l, S_k) maximizes the softplus proxy of Eq. 6, a
lower bound on I^P(X; Y) that shapes both theta and the LM's features omega.

Phase II (Sec. 3.2, after the NT-ASGD switching condition or ``phase2_start`` steps): IW-RAML.
Y~ is drawn from the geometric proposal G over the sentences following Y* = S_{l+1} (Eq. 15), the
reward is r = D(phi_X, phi_Y~) - D(phi_X, phi_Y*) (Eq. 14), and the LM maximizes the conditional
log-likelihood log Q(Y~ | X) weighted by exp(r / beta) / G, self-normalized over the minibatch (Eq. 16).

The term samples its own sentence pairs from the training split at every call and runs ``model`` on
them from ``model.init_state``; it does not use the trainer's stream batch. Its losses are ``bmi``
(Phase I) and ``bmi_raml`` (Phase II). theta has its own Adam (``param_groups``).

Placebo (``lm_gradient: false``): Phase I trains D_theta exactly as before (the same samples, dropout
masks and scores), but on phi detached from the LM, so the LM gets no gradient from the term: what
is left of BMI is its cost, its random draws and a discriminator watching the LM's features. Phase II
(IW-RAML, Eq. 16) trains the LM alone (its reward and weights are constants, theta gets nothing from it),
so its placebo would be no loss at all: the placebo is Phase I only, and ``variant: full`` with it is
refused (the placebo of BMI-full and of BMI-base is the same run).

RAML on the proposal alone (``reward: none``): Phase II as in BMI-full with the reward of Eq. 14 replaced by
0, so the weights of Eq. 16 are 1/G alone, self-normalized: the LM fits the sentences near the true next one
that the geometric proposal draws, and the discriminator (still trained by Phase I, still scored and logged)
has no say in which. Every draw is the same as BMI-full's, so a paired run against BMI-full asks whether the
MI part of Phase II (the discriminator's reward) is what moves the LM, or the extra next-sentence likelihood.

Diagnostics (``evaluation_metrics``, at every evaluation, with the training weights in evaluation mode,
from random draws of their own): D_theta's accuracy, Eq. 6 proxy and Eq. 4 bound on ``valid_pairs``
fixed held-out pairs of the valid split, and for the same pairs what IW-RAML's weights would be (in any
variant and phase): their ESS, the weight on Y* itself, and both for the proposal weights 1/G alone
(``objectives/bmi_diagnostics.py``).

Choices where the paper is silent: phi pools ``output.hiddens`` (the layer outputs the model
returns, dropout included in training) over each sentence's real tokens; the IW-RAML loss is the
weighted *summed* log-likelihood of Y~ divided by the minibatch's mean length of Y~ (a constant
rescaling to per-token scale, so the weight means the same as for the per-token MLE); the reward
and the importance weights are constants for the gradient (Eq. 16 differentiates log Q only).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.data.pairs import SentenceIndex, concat_padded
from infolm.errors import InfolmError
from infolm.evaluation.mi import PairDiscriminator, dv_mi_lower_bound, jsd_mi_lower_bound
from infolm.models.base import LanguageModel
from infolm.objectives.base import Batch, Objective, Terms, register_objective
from infolm.objectives.bmi_diagnostics import HeldOutPairs, discriminator_accuracy, raml_weight_diagnostics
from infolm.optim.ntasgd import NonMonotoneTrigger


@dataclasses.dataclass
class BMIConfig:
    weight: float = 0.1  # multiplier of the whole term in the Composite; paper 0.1 (PTB), 0.02 (WT2)
    phase1_weight: float = 1.0  # relative weight of the Phase-I proxy, Eq. 6 (0: Phase II only)
    phase2_weight: float = 1.0  # relative weight of IW-RAML, Eq. 16, once Phase II is on
    variant: str = "full"  # full: Phase I, then I + II (BMI-full) | base: Phase I throughout (BMI-base)
    phase2_start: int | None = None  # switch to Phase II after this many steps (None: NT-ASGD condition)
    nonmono: int = 5  # non-monotone interval of the NT-ASGD switching condition (Merity et al.: 5)
    batch_size: int = 12  # sentence pairs M per step (Alg. 1); paper: the LM batch size (MoS PTB: 12)
    max_sentence_len: int = 60  # sentences are cut to this many tokens (PTB: 99.9% are shorter)
    hidden: int = 500  # hidden units of D_theta; paper 500
    lr: float = 2e-4  # Adam learning rate of theta; paper 2e-4
    weight_decay: float = 1e-6  # Adam weight decay of theta; paper 1e-6
    lam: float = 0.3  # lambda of the geometric proposal G, Eq. 15; paper 0.3
    beta: float = 1.0  # RAML temperature beta of the pay-off exp(r / beta), Eq. 13; paper 1
    features: str = "hiddens"  # hiddens | raw_hiddens: the per-layer states that phi max-pools
    lm_gradient: bool = True  # false: placebo, D_theta trains on phi without a graph, the LM gets no gradient
    reward: str = "discriminator"  # discriminator: Eq. 14 | none: r = 0, the weights are 1/G alone (a control)
    valid_pairs: int = 500  # fixed held-out valid pairs for the diagnostics of every evaluation (0: none)
    valid_seed: int = 0  # seed of their one draw (chosen here; the paper reports no such diagnostics)

    def __post_init__(self) -> None:
        if self.variant not in ("full", "base"):
            raise InfolmError(f"objective.bmi.variant must be full or base, got {self.variant!r}")
        if self.reward not in ("discriminator", "none"):
            raise InfolmError(f"objective.bmi.reward must be discriminator or none, got {self.reward!r}")
        if self.features not in ("hiddens", "raw_hiddens"):
            raise InfolmError(f"objective.bmi.features must be hiddens or raw_hiddens, got {self.features!r}")
        for key in ("phase1_weight", "phase2_weight", "weight_decay"):
            if getattr(self, key) < 0:
                raise InfolmError(f"objective.bmi.{key} must be non-negative, got {getattr(self, key)}")
        for key in ("nonmono", "batch_size", "max_sentence_len", "hidden"):
            if getattr(self, key) < 1:
                raise InfolmError(f"objective.bmi.{key} must be positive, got {getattr(self, key)}")
        if self.batch_size < 2:
            raise InfolmError("objective.bmi.batch_size must be at least 2 (self-normalized weights)")
        if not 0.0 < self.lam <= 1.0:
            raise InfolmError(f"objective.bmi.lam must be in (0, 1], got {self.lam}")
        if self.beta <= 0 or self.lr <= 0:
            raise InfolmError("objective.bmi.beta and objective.bmi.lr must be positive")
        if self.phase2_start is not None and self.phase2_start < 0:
            raise InfolmError(f"objective.bmi.phase2_start must be non-negative, got {self.phase2_start}")
        if not self.lm_gradient and self.variant == "full":
            raise InfolmError(
                "objective.bmi.lm_gradient false is the placebo of Phase I; Phase II trains only the LM, so it has "
                "no placebo: use variant base"
            )
        if self.reward != "discriminator" and self.variant == "base":
            raise InfolmError("objective.bmi.reward is the pay-off of Phase II (IW-RAML); variant base has no Phase II")
        if self.valid_pairs < 0:
            raise InfolmError(f"objective.bmi.valid_pairs must be non-negative, got {self.valid_pairs}")


def max_pool_features(layers: list[Tensor], lengths: Tensor) -> Tensor:
    """phi: max over each sequence's first ``lengths`` steps of every layer, concatenated. (B, sum H_l)."""
    steps = layers[0].size(1)
    pad = torch.arange(steps, device=lengths.device)[None, :, None] >= lengths[:, None, None]  # (B, T, 1)
    return torch.cat([h.masked_fill(pad, float("-inf")).amax(dim=1) for h in layers], dim=-1)


def importance_weights(reward: Tensor, log_proposal: Tensor, beta: float = 1.0) -> Tensor:
    """Self-normalized weights of Eq. 16: exp(r / beta) / G, normalized over the minibatch (sum to 1). (M,)."""
    return torch.softmax(reward / beta - log_proposal, dim=0)


def conditional_log_likelihood(
    model: LanguageModel, x: Tensor, x_len: Tensor, y: Tensor, y_len: Tensor, pad_id: int = 0
) -> Tensor:
    """log Q(Y | X) summed over Y's tokens, reading X then Y from the initial state. x, y padded; returns (B,).

    A model that offers ``hidden_states`` (the recurrent pass alone) and ``output_log_probs`` (its output
    layer alone, (B, T, H) -> (B, T, V) log-probabilities) gets its output layer over Y's positions only:
    the same numbers (tested), without the softmax over X and the padding (the MoS head costs K x V a
    position)."""
    x, y = x[:, : int(x_len.max())], y[:, : int(y_len.max())]  # no column of padding alone
    tokens, total = concat_padded(x, x_len, y, y_len, pad_id)  # (B, Lx+Ly)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    state = model.init_state(inputs.size(0), inputs.device)
    head, recurrent = getattr(model, "output_log_probs", None), getattr(model, "hidden_states", None)
    if callable(head) and callable(recurrent):
        last = recurrent(inputs, state).hiddens[-1]  # (B, L-1, H): the output layer's input
        span = torch.arange(y.size(1), device=y.device)[None, :]  # (1, Ly)
        # y_j is the target of input position x_len - 1 + j (the model has read X and y_<j)
        where = (x_len[:, None] - 1 + span).clamp(max=last.size(1) - 1)  # (B, Ly)
        at_y = last.gather(1, where[..., None].expand(-1, -1, last.size(-1)))  # (B, Ly, H), right-padded rows
        log_probs = head(at_y).float().gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (B, Ly)
        return torch.where(span < y_len[:, None], log_probs, 0.0).sum(dim=1)
    output = model(inputs, state)
    log_probs = F.log_softmax(output.logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    position = torch.arange(1, tokens.size(1), device=tokens.device)[None, :]  # position of each target
    in_y = (position >= x_len[:, None]) & (position < total[:, None])  # (B, L-1)
    return (log_probs * in_y).sum(dim=1)


@register_objective("bmi", config=BMIConfig)
class BMI(Objective):
    """Bootstrapped MI regularizer: next-sentence discriminator (Phase I) and IW-RAML (Phase II)."""

    # Cao & Xu regularize a stream LM (AWD-LSTM-MoS over running text): the dependency between
    # consecutive sentences is what it bootstraps.
    needs = frozenset({"next-token", "stream"})

    @classmethod
    def extra_input_length(cls, config: Any) -> int | None:
        return None  # whole sentences of the corpus, of any length

    def __init__(self, config: BMIConfig) -> None:
        super().__init__()
        self.config = config
        self.index: SentenceIndex | None = None
        self.discriminator: PairDiscriminator | None = None
        self.phase2 = False
        self.trigger = NonMonotoneTrigger(config.nonmono)
        self.held_out: HeldOutPairs | None = None

    # --- setup and optimizer ---

    def setup(self, corpus: Any, model: nn.Module) -> None:
        """Index the training sentences; size D_theta from the model's per-layer hidden widths."""
        lines = corpus.num_sentences("train")
        if lines < 2:
            raise InfolmError(
                f"objective bmi pairs consecutive sentences of the training text, one per line: it has {lines} "
                "line; give it at least two"
            )
        c = self.config
        self.index = SentenceIndex.from_corpus(corpus, "train", max_len=c.max_sentence_len)
        # the held-out pairs of the diagnostics; none without a valid split of two lines or more
        if c.valid_pairs > 0 and "valid" in getattr(corpus, "splits", ()) and corpus.num_sentences("valid") >= 2:
            valid = SentenceIndex.from_corpus(corpus, "valid", max_len=c.max_sentence_len)
            self.held_out = HeldOutPairs.draw(valid, c.valid_pairs, c.lam, c.valid_seed)
        if self.discriminator is None:
            self.discriminator = PairDiscriminator(self.feature_size(cast(LanguageModel, model)), self.config.hidden)

    def loss_scale(self, vocab_size: int) -> float | None:
        # Phase I: -JSD bound = E_P SP(-T) + E_PxP SP(T), two binary cross-entropies, 2 ln 2 at T = 0;
        # Phase II: IW-RAML, a cross-entropy over the vocabulary on a per-token scale
        c = self.config
        phase2 = c.phase2_weight * math.log(max(vocab_size, 2)) if c.variant == "full" else 0.0
        return c.phase1_weight * 2 * math.log(2) + phase2

    def feature_size(self, model: LanguageModel) -> int:
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        with torch.no_grad():
            output = model(torch.zeros(1, 1, dtype=torch.long, device=device), model.init_state(1, device))
        model.train(was_training)
        return sum(h.size(-1) for h in self._layers(output))

    def param_groups(self) -> list[dict[str, Any]]:
        if self.discriminator is None:
            raise RuntimeError("BMI.setup(corpus, model) must run before param_groups()")
        c = self.config
        params = list(self.discriminator.parameters())
        return [{"params": params, "optimizer": "adam", "lr": c.lr, "weight_decay": c.weight_decay}]

    # --- phase switching ---

    def on_step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        c = self.config
        if c.variant == "full" and c.phase2_start is not None and step >= c.phase2_start:
            self.phase2 = True

    def on_evaluation(self, step: int, valid_loss: float) -> None:
        # the SGD -> ASGD switching condition of Merity et al. also switches Phase I -> II (Sec. 5)
        fired = self.trigger.observe(valid_loss)
        if self.config.variant == "full" and self.config.phase2_start is None and fired:
            self.phase2 = True

    def get_extra_state(self) -> dict[str, Any]:
        return {"phase2": torch.tensor(self.phase2), "trigger": self.trigger.state_dict()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.phase2 = bool(state["phase2"])
        self.trigger.load_state_dict(state["trigger"])

    # --- the term ---

    def _layers(self, output: Any) -> list[Tensor]:
        layers = output.raw_hiddens if self.config.features == "raw_hiddens" else output.hiddens
        if not layers:
            raise InfolmError(f"objective.bmi needs a model that returns {self.config.features}")
        return list(layers)

    def features(self, model: LanguageModel, tokens: Tensor, lengths: Tensor) -> Tensor:
        """phi_omega of each padded sentence, from the model's initial state. (B, F)."""
        # a model may offer hidden_states(): the same pass without its softmax (phi needs no logits)
        run = getattr(model, "hidden_states", model)
        output = run(tokens, model.init_state(tokens.size(0), tokens.device))
        return max_pool_features(self._layers(output), lengths)

    def forward(self, model: nn.Module, batch: Batch, output: Any) -> Terms:
        if self.index is None or self.discriminator is None:
            raise RuntimeError("BMI.setup(corpus, model) must run before training")
        c = self.config
        lm = cast(LanguageModel, model)
        use_phase2 = self.phase2 and c.phase2_weight > 0
        if c.phase1_weight == 0 and not use_phase2:
            return Terms()  # nothing to optimize: no compute, no RNG use
        device = batch.inputs.device
        if self.index.stream.device != device:
            self.index = self.index.to(device)  # gather sentence batches where the model runs
        m = c.batch_size
        x_idx, y_idx = self.index.sample_positive(m)  # (S_l, S_{l+1}) ~ P_XY
        indices = [x_idx, y_idx, self.index.sample_negative(m)]  # S_k ~ P_Y for P_X x P_Y
        if use_phase2:
            tilde_idx, log_g = self.index.sample_geometric(y_idx, c.lam)  # Y~ ~ G(. | Y* = S_{l+1}), Eq. 15
            indices.append(tilde_idx)
        tokens, lengths = self.index.batch(torch.cat(indices))
        tokens, lengths = tokens.to(device), lengths.to(device)
        phi = self.features(lm, tokens, lengths)  # (k*M, F)
        if not c.lm_gradient:
            # placebo: detached, not computed without a graph, so D_theta sees the very same numbers
            # (the LSTM's inference kernels differ in the last bits) and gets the very same gradient
            phi = phi.detach()
        phi_x, phi_y, phi_neg = phi[:m], phi[m : 2 * m], phi[2 * m : 3 * m]
        pos, neg = self.discriminator(phi_x, phi_y), self.discriminator(phi_x, phi_neg)  # (M,), (M,)

        terms = Terms()
        if c.phase1_weight > 0:
            terms.losses["bmi"] = -c.phase1_weight * jsd_mi_lower_bound(pos, neg)  # maximize Eq. 6
        with torch.no_grad():
            terms.metrics["bmi_mine"] = float(dv_mi_lower_bound(pos, neg))  # Eq. 4 on this minibatch
            terms.metrics["bmi_acc"] = float(discriminator_accuracy(pos, neg))
        terms.metrics["bmi_phase"] = 2.0 if self.phase2 else 1.0

        if use_phase2:
            with torch.no_grad():
                reward = self.discriminator(phi_x, phi[3 * m :]) - pos  # Eq. 14, shift by the score of Y*
                # the control zeroes the pay-off after scoring it, so its draws stay those of BMI-full
                paid = reward if c.reward == "discriminator" else torch.zeros_like(reward)
                weights = importance_weights(paid, log_g.to(device), c.beta)  # Eq. 16, self-normalized
            x_tokens, x_len = tokens[:m], lengths[:m]
            y_tokens, y_len = tokens[3 * m :], lengths[3 * m :]
            log_q = conditional_log_likelihood(lm, x_tokens, x_len, y_tokens, y_len, self.index.pad_id)  # (M,)
            raml = -(weights * log_q).sum() / y_len.float().mean()
            terms.losses["bmi_raml"] = c.phase2_weight * raml
            # ESS of the IS and the weight on Y* (offset 0 of G), each against the proposal weights 1/G alone
            is_true = (tilde_idx == y_idx).to(device)
            terms.metrics.update(raml_weight_diagnostics(weights, log_g.to(device), is_true, prefix="bmi_raml_"))
            terms.metrics["bmi_raml_reward"] = float(reward.mean())
        return terms

    # --- diagnostics at every evaluation ---

    def evaluation_metrics(self, model: nn.Module) -> dict[str, float]:
        """D_theta and IW-RAML's weights on the fixed held-out pairs (``bmi_diagnostics.HeldOutPairs``)."""
        if self.held_out is None or self.discriminator is None:
            return {}
        c, pairs, lm = self.config, self.held_out, cast(LanguageModel, model)
        device = next(model.parameters()).device
        if pairs.index.stream.device != device:
            pairs.index = pairs.index.to(device)
        was_training, d_was_training = model.training, self.discriminator.training
        model.eval()  # no dropout: the scores are a function of the weights alone, and no random draws
        self.discriminator.eval()
        try:
            with torch.no_grad():
                n = pairs.x.numel()
                phi = torch.cat(
                    [
                        self.features(lm, *pairs.index.batch(chunk))
                        for chunk in torch.cat([pairs.x, pairs.y, pairs.neg, pairs.tilde]).split(256)
                    ]
                )  # (4n, F)
                phi_x = phi[:n]
                pos, neg = self.discriminator(phi_x, phi[n : 2 * n]), self.discriminator(phi_x, phi[2 * n : 3 * n])
                tilde = self.discriminator(phi_x, phi[3 * n :])
        finally:
            model.train(was_training)
            self.discriminator.train(d_was_training)
        return pairs.scores_diagnostics(pos.float(), neg.float(), tilde.float(), c.batch_size, c.beta)
