"""Environments: the ``EnvBase`` contract, utilities, wrappers and custom envs."""
