"""Value estimation: returns and advantages from rewards, values and episode ends.

The functions live in :mod:`torchrl.objectives.value.functional` and are re-exported here; the
estimator modules (``GAE``, ``TD0Estimator``, ...) live in
:mod:`torchrl.objectives.value.estimators`.
"""

from __future__ import annotations

from torchrl.objectives.value import functional
from torchrl.objectives.value.estimators import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
    VTrace,
)
from torchrl.objectives.value.functional import (
    generalized_advantage_estimate,
    reward2go,
    td0_advantage_estimate,
    td0_return_estimate,
    td1_advantage_estimate,
    td1_return_estimate,
    td_lambda_advantage_estimate,
    td_lambda_return_estimate,
    vec_generalized_advantage_estimate,
    vec_td1_advantage_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_advantage_estimate,
    vec_td_lambda_return_estimate,
    vtrace_advantage_estimate,
)
from torchrl.objectives.value.multiagent import MultiAgentGAE

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
    "functional",
    "generalized_advantage_estimate",
    "reward2go",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
    "vtrace_advantage_estimate",
]
