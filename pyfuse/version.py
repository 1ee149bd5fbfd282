"""pyfuse's version, on the ground floor: the on-disk caches name their entries by it
(:mod:`pyfuse.runtime.cache`, :mod:`pyfuse.runtime.variant_cache`) and read it from here
rather than from the ``pyfuse`` package, which stands above them. Keep it equal to
``pyproject.toml``'s ``version``."""

__version__ = "0.1.0"
