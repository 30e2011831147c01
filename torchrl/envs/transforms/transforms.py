"""TorchRL's ``torchrl.envs.transforms.transforms`` path; the transforms live in :mod:`torchrl.envs.transforms`."""

# A star import of the package's ``__all__``: every transform added to the package resolves here
# too, with no second list to keep in step.
from torchrl.envs.transforms import *  # noqa: F403
from torchrl.envs.transforms import __all__  # noqa: F401
