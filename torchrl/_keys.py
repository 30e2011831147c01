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

#: The three done-like entries every env writes (``done = terminated | truncated``).
DONE_KEYS = (DONE, TERMINATED, TRUNCATED)
