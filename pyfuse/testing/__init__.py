"""Testing tools that ship with pyfuse: the CPU simulator harness (:mod:`.simulator`) and the
random-fusion fuzzer (:mod:`.fuzz`, ``python -m pyfuse.testing.fuzz``).

Importing this package imports nothing else of pyfuse; its modules load NumPy and the
compiler when imported.
"""
