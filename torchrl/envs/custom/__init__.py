"""Pure-torch environments shipped with torchrl."""
