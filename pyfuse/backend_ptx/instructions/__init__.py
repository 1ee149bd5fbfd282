"""One module per PTX instruction family; each helper validates, then returns an Instr.

Helpers never touch a kernel builder: they are pure functions from registers and
immediates to :class:`~pyfuse.backend_ptx.operands.Instr` values, so the lowering
decides where an instruction goes and a test can compare the text directly.
"""
