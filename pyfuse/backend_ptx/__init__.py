"""PTX backend: emitter, instruction helpers, wgmma descriptors, TMA maps, driver, ptxas.

Importing this package loads nothing heavy: the CUDA driver bindings are imported
lazily inside :mod:`pyfuse.backend_ptx.driver`, and ``ptxas`` runs only when asked.
"""
