"""The simulator harness, re-exported for tests: it lives in :mod:`pyfuse.testing.simulator`."""

from pyfuse.testing.simulator import check_fusion, random_inputs, run_on_simulator

__all__ = ["check_fusion", "random_inputs", "run_on_simulator"]
