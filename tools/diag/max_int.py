import os, sys
import numpy as np, torch
import pyfuse as pf
out = os.environ.get("OUT", "/tmp")
rng = np.random.default_rng(0)
both = pf.fuse(lambda v0: (v0.ceil(), pf.max(-v0.ceil(), (1,), keepdim=True)), name="both")
alone = pf.fuse(lambda v0: pf.max(-v0.ceil(), (1,), keepdim=True), name="alone")
plain = pf.fuse(lambda v0: (v0 + 0, pf.max(-v0, (1,), keepdim=True)), name="plain")
for fn in (both, alone, plain):
    bad_total = 0
    for trial in range(4):
        x = torch.from_numpy(rng.integers(-2**31, 2**31 - 1, (146, 128)).astype(np.int32)).cuda() if trial % 2 else torch.from_numpy(rng.integers(-50, 50, (146, 128)).astype(np.int32)).cuda()
        r = fn(x)
        m = r[1] if isinstance(r, tuple) else r
        want = (-x).max(1, keepdim=True).values
        bad = (m != want).squeeze(1)
        bad_total += int(bad.sum())
        if bad.any() and trial < 2:
            i = int(bad.nonzero()[0])
            print(fn.__name__ if hasattr(fn, "__name__") else "", trial, "row", i, "got", int(m[i]), "want", int(want[i]), "row has got?", bool(((-x[i]) == m[i]).any()), "other rows have it", int(((-x) == m[i]).any(1).sum()))
    print("bad rows total", bad_total)
c = both.compile(pf.spec((146, 128), pf.int32))
open(f"{out}/both.ptx", "w").write(c.kernels[0].ptx)
