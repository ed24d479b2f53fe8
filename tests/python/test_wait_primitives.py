"""The device waits of syncopate.language compiled for sm_90 (no GPU needed): no CTA barrier on
their path, since the threads of a program may disagree on leaving the spin loop and a barrier
reached by some warps only can hang the kernel (compile_wait_primitives.py says more)."""


def test_waits_have_no_cta_barrier_and_claim_the_record_with_a_cas(run_compile_script):
    run = run_compile_script("compile_wait_primitives.py", timeout=300)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(("OK ", "FAIL "))]
    assert run.returncode == 0 and len(lines) == 8 and all(ln.startswith("OK ") for ln in lines), (
        "\n".join(lines) + run.stderr[-3000:]
    )
