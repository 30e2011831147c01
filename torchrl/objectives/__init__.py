"""Objectives: losses and value estimators.

``torchrl.objectives.value.functional`` holds the value and advantage estimates as plain functions
on tensors (GAE, TD(0), TD(1), TD(lambda), V-trace, reward-to-go).
"""
