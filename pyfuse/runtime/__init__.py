"""The runtime: everything between a traced Fusion and kernels running on the GPU.

It stands above the compiler's passes (:mod:`pyfuse.passes`) and the PTX backend
(:mod:`pyfuse.backend_ptx`) and below the frontend (:mod:`pyfuse.frontend`: the decorator,
the symbolic Tensor and the ops), which calls into it and which it never imports: a
``FusedFunction`` reaches it as a duck-typed object (``fn``, ``name``, ``matmul``,
``trace``). Its floors, each importing only those under it (function-local imports too):

1. ``location`` (the user's ``file:line``), ``spec`` (``pf.spec`` and how an array is
   described from its metadata), ``guards`` (the captured Python values a trace reads),
   ``cache`` (the cubin cache and the JIT thread);
2. ``arrays`` (argument kinds, the call key, ``DeviceArray``), ``diagnose`` (errors in the
   user's terms);
3. ``launch`` (targets, launch plans, kernels loaded per device, ``Compiled.__call__``),
   ``repeat_call`` (the warm call's shortcut for a call like the last);
4. ``compiled`` (``pf.Compiled``, ``pf.Kernel``: the artifacts, importing nothing of the
   compiler);
5. ``variant_cache`` (whole compile results on disk);
6. ``compile`` (the compile driver: the pass pipeline and the PTX emitter), ``autotune``
   (timing matmul candidates; the winners on disk);
7. ``calls`` (``FusedFunction.__call__`` and ``.compile``: signatures, the in-memory
   compile cache, bind and launch).

The compile driver is a floor of the runtime rather than a module of its own between the
passes and the runtime: what it makes, ``Compiled``, is also what runs (its ``__call__``
launches), and the variant cache restores it without the compiler, so ``Compiled`` must
stand below the driver and the launcher below ``Compiled``, while the call path, which
compiles on a miss, stands above the driver. A compiler module under the runtime would
have to import the runtime back. ``import pyfuse`` loads only ``location``, ``spec`` and
``compiled``; the rest loads with the first compile or call, the passes and the emitter with
the first compile that the variant cache does not answer.
"""
