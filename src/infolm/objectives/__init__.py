"""Training objectives. Importing this package registers every term in ``OBJECTIVES``."""

from infolm.objectives import activation_reg, bmi, imm, latent_mc, mle, multisample, noising  # noqa: F401  (registration)
from infolm.objectives.base import OBJECTIVES, Batch, Composite, Objective, Terms, build_objective, register_objective

__all__ = ["OBJECTIVES", "Batch", "Composite", "Objective", "Terms", "build_objective", "register_objective"]
