"""The attention kernel and its transformed form (in-loop waits, arrival-order loop) compile for
sm_90 through Triton's passes and ptxas (no GPU): the renumbered loop variable and the in-loop
wait are valid Triton (transformed at head dim 64 not causal and 128 causal; the original at 128
causal; compile_attention_kernels.py), and the K/V loop stays pipelined through the wait."""

import json


def test_attention_kernels_compile_for_sm90(run_compile_script, tmp_path):
    run = run_compile_script("compile_attention_kernels.py", timeout=600, cache_dir=tmp_path)
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3, run.stdout + run.stderr
    failed = [r for r in rows if not r["ok"]]
    assert not failed, "\n".join(f"{r['kernel']} d={r['head_dim']} causal={r['causal']}: {r['error']}" for r in failed)
    assert run.returncode == 0, run.stderr
    # The loop-free in-loop wait keeps the K/V loop pipelined: as many async copies as the
    # original's (a wait with a loop inside, or an unpredicated one, would leave none or fail).
    copies = {(r["kernel"], r["head_dim"], r["causal"]): r["async_copies"] for r in rows}
    assert copies[("original", 128, True)] > 0, copies
    assert copies[("transformed", 128, True)] == copies[("original", 128, True)], copies
