import os
import sys

# The trainer tests' helpers (_trainer_helpers.py, _resume_child.py) live next to them.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
