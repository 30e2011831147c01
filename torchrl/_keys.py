"""Reserved TensorDict keys of the data contract (see ``DESIGN.md`` §2).

Components take their keys as arguments and default to these constants; nothing else in the
library spells these strings out.
"""

from __future__ import annotations

NEXT = "next"
OBSERVATION = "observation"
PIXELS = "pixels"
ACTION = "action"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
TRUNCATED = "truncated"
RESET = "_reset"
IS_INIT = "is_init"
STEP_COUNT = "step_count"
EPISODE_REWARD = "episode_reward"
STATE_VALUE = "state_value"
STATE_ACTION_VALUE = "state_action_value"
ACTION_VALUE = "action_value"
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
ACTION_LOG_PROB = "action_log_prob"
# the paper-era name of the log-probability entry; data that carries it is still read
SAMPLE_LOG_PROB = "sample_log_prob"
LOC = "loc"
SCALE = "scale"
LOGITS = "logits"
PARAM = "param"
INDEX = "index"
PRIORITY = "td_error"
WEIGHT = "_weight"
COLLECTOR = "collector"
TRAJ_IDS = "traj_ids"
MASK = "mask"
ACTION_MASK = "action_mask"
#: the version of the weights that produced a collected step (asynchronous collection)
POLICY_VERSION = "policy_version"

#: The three done-like entries every env writes (``done = terminated | truncated``).
DONE_KEYS = (DONE, TERMINATED, TRUNCATED)


def paper_era_log_prob_key(key: str | tuple[str, ...]) -> str | tuple[str, ...] | None:
    """``"sample_log_prob"`` in place of a final ``"action_log_prob"`` (``None`` for other keys).

    Losses read the log-probability of the collecting policy at ``"action_log_prob"`` (or
    ``(group, "action_log_prob")``) by default; data written with the paper-era name is found
    through this key.
    """
    if key == ACTION_LOG_PROB:
        return SAMPLE_LOG_PROB
    if isinstance(key, tuple) and key and key[-1] == ACTION_LOG_PROB:
        return (*key[:-1], SAMPLE_LOG_PROB)
    return None
