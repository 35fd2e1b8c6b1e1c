"""Training objectives. Importing this package registers every term in ``OBJECTIVES``."""

from infolm.objectives import (  # noqa: F401  (registration)
    activation_reg,
    ae,
    amim,
    bmi,
    classification,
    dim,
    elbo,
    imm,
    imm_mlm,
    latent_mc,
    mle,
    mlm,
    mlm_nce,
    multisample,
    noising,
    nsp,
    skipgram_nce,
    vq_vae,
)
from infolm.objectives.base import OBJECTIVES, Batch, Composite, Objective, Terms, build_objective, register_objective

__all__ = ["OBJECTIVES", "Batch", "Composite", "Objective", "Terms", "build_objective", "register_objective"]
