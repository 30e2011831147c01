"""Peer side of ``benchmarks/losses.py``: the same loss updates under TorchRL.

Run by the peers' python (``TORCHRL_PEERS_PYTHON``) from outside the repo, so that ``import
torchrl`` finds TorchRL and not this package. Prints one JSON object per case.

Usage: ``python torchrl_losses.py [SECONDS_PER_CASE]``
"""

from __future__ import annotations

import json
import sys
import warnings


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.3
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    try:
        import torchrl
        from torchrl import modules, objectives
    except Exception as err:  # a peer that does not import is reported, not fatal
        print(json.dumps({"bench": "losses", "impl": "torchrl-peer", "skipped": repr(err)[:300]}))
        return
    from loss_cases import make_cases  # this script's own folder
    from spec_cases import time_cases

    impl = f"torchrl-{torchrl.__version__}"
    for name, us in time_cases(make_cases(modules, objectives), seconds).items():
        print(
            json.dumps({"bench": "losses", "impl": impl, "case": name, "us_per_call": round(us, 2)})
        )


if __name__ == "__main__":
    main()
