"""Backward of syncopate.ops.ulysses_attention / ring_attention (ops/seq_attention_grad.py) on the CPU.

The reference everywhere: autograd through plain SDPA on the gathered sequence (float32), this
rank's rows of dq, dk, dv.
- one rank (no process group, and a one-rank gloo group): both ops, causal or not, GQA;
- worlds 2-4 as threads exchanging through a stand-in of the group (`ThreadComm`: the same two
  exchanges as GroupComm): every rank's gradients; causal ring ranks compute only the pieces up to
  their own (rank r: r + 1 piece backwards) and still return every piece's full dk, dv;
- two gloo ranks in two processes (GroupComm over torch.distributed): both ops, causal or not, GQA
  (`check_gradients_at_two_ranks`, run by test_seq_attention_ops.py's two processes);
- under torch.compile (aot_eager) the gradients are SDPA's too (the op runs eagerly, a graph break);
- what the forward keeps for the backward: q, k, v, o and one float32 log-sum-exp per row, no more;
- refusals by name: mode='fused' or compute='triton' with an operand requiring grad; under
  torch.no_grad() the forward-only paths are unchanged.
"""

import os
import threading

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")


def _global(seed, z=1, h=4, h_kv=2, n=32, d=16):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(z, hh, n, d, generator=gen) for hh in (h, h_kv, h_kv))
    grad_o = torch.randn(z, h, n, d, generator=gen)
    return q, k, v, grad_o


def _reference(q, k, v, grad_o, causal):
    """(o, dq, dk, dv) by autograd through SDPA on the whole sequence."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), grad_o))


def _close(got, ref, what):
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=5e-5, msg=lambda m: f"{what}: {m}")


class ThreadWorld:
    """W threads' shared mailbox: each exchange posts, meets the others at a barrier, reads."""

    def __init__(self, world):
        self.world = world
        self.barrier = threading.Barrier(world, timeout=60)
        self.box = {}
        self.log = {r: [] for r in range(world)}  # what each rank exchanged, in order


class _Done:
    def __init__(self, tensors):
        self.tensors = tensors

    def wait(self):
        return self.tensors


class ThreadComm:
    """GroupComm's interface (all_to_all, ring_pass) between the threads of a ThreadWorld."""

    def __init__(self, shared, rank):
        self.shared, self.rank, self.world = shared, rank, shared.world

    def _exchange(self, key, value, read):
        s = self.shared
        s.box[(key, self.rank)] = value
        s.barrier.wait()
        got = read(s.box)
        s.barrier.wait()  # nobody posts the next value before everyone has read this one
        return got

    def all_to_all(self, x):
        self.shared.log[self.rank].append(("all_to_all", tuple(x.shape)))
        w, r = self.world, self.rank
        return self._exchange("a2a", x.clone(), lambda box: torch.stack([box[("a2a", s)][r] for s in range(w)]))

    def ring_pass(self, tensors, tag):
        self.shared.log[self.rank].append(("ring_pass", tag))
        frm = (self.rank - 1) % self.world
        got = self._exchange(tag, [t.clone() for t in tensors], lambda box: [t.clone() for t in box[(tag, frm)]])
        return _Done(got)


def _run_threads(world, body):
    """body(rank, comm) on `world` threads; their results by rank (re-raises the first error)."""
    shared = ThreadWorld(world)
    results, errors = {}, []

    def run(rank):
        try:
            results[rank] = body(rank, ThreadComm(shared, rank))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            shared.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return results, shared


def _rank_grads(kind, rank, comm, q_all, k_all, v_all, grad_all, causal, s_loc):
    from syncopate.ops.seq_attention_grad import trainable

    rows = slice(rank * s_loc, (rank + 1) * s_loc)
    q, k, v = (t[:, :, rows].clone().requires_grad_() for t in (q_all, k_all, v_all))
    o = trainable(kind, q, k, v, causal=causal, group=None, sm_scale=None, mode="auto", compute="sdpa", comm=comm)
    o.backward(grad_all[:, :, rows])
    return o.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["ulysses", "ring"])
@pytest.mark.parametrize("heads", [(4, 2), (4, 4)])
def test_one_rank_gradients_equal_sdpa(kind, causal, heads):
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v, grad_o = _global(1, h=heads[0], h_kv=heads[1], d=64)
    ref = _reference(q, k, v, grad_o, causal)
    fn = ulysses_attention if kind == "ulysses" else ring_attention
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = fn(*leaves, causal=causal)
    o.backward(grad_o)
    for name, got, want in zip(("o", "dq", "dk", "dv"), (o.detach(), *(t.grad for t in leaves)), ref):
        _close(got, want, f"{kind} causal={causal} {name}")


def test_one_rank_process_group_and_scale(single_rank_group):
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v, grad_o = _global(2, d=128)
    for fn in (ulysses_attention, ring_attention):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        o = fn(*leaves, causal=True, sm_scale=0.3)
        o.backward(grad_o)
        ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = torch.nn.functional.scaled_dot_product_attention(*ref_leaves, is_causal=True, scale=0.3, enable_gqa=True)
        ref.backward(grad_o)
        for name, a, b in zip("qkv", leaves, ref_leaves):
            _close(a.grad, b.grad, f"{fn.__name__} d{name}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("kind", ["ulysses", "ring"])
def test_worlds_as_threads_every_rank_gradients(kind, world, causal):
    s_loc = 8
    # Ulysses: the world divides both head counts; GQA group 2 either way.
    h, h_kv = (2 * world, world) if kind == "ulysses" else (4, 2)
    q_all, k_all, v_all, grad_all = _global(10 + world, h=h, h_kv=h_kv, n=world * s_loc)
    ref = _reference(q_all, k_all, v_all, grad_all, causal)
    results, shared = _run_threads(
        world, lambda r, comm: _rank_grads(kind, r, comm, q_all, k_all, v_all, grad_all, causal, s_loc)
    )
    for rank in range(world):
        rows = slice(rank * s_loc, (rank + 1) * s_loc)
        for name, got, want in zip(("o", "dq", "dk", "dv"), results[rank], ref):
            _close(got, want[:, :, rows], f"{kind} world {world} causal={causal} rank {rank} {name}")
    if kind == "ulysses":  # one all-to-all each way in the forward and in the backward
        assert all(len(shared.log[r]) == 4 for r in range(world)), shared.log
    else:  # forward: W - 1 K/V passes; backward: W - 1 K/V passes, W passes of the partial sums
        for r in range(world):
            tags = [tag for _, tag in shared.log[r]]
            assert tags.count(1) == 2 * (world - 1) and tags.count(2) == world, tags


@pytest.mark.parametrize("world", [3, 4])
def test_causal_ring_backward_skips_pieces_after_the_own(world, monkeypatch):
    """Rank r computes the backward of pieces 0..r only (r + 1 calls), yet every rank's dk, dv are
    the full sums (checked against SDPA above; here the call counts)."""
    from syncopate.ops import seq_attention_grad

    calls = {}
    original = seq_attention_grad.attention_backward
    lock = threading.Lock()

    def counting(*args, **kwargs):
        with lock:
            calls[threading.current_thread().name] = calls.get(threading.current_thread().name, 0) + 1
        return original(*args, **kwargs)

    monkeypatch.setattr(seq_attention_grad, "attention_backward", counting)
    q_all, k_all, v_all, grad_all = _global(20, n=world * 8)

    def body(rank, comm):
        threading.current_thread().name = f"rank{rank}"
        return _rank_grads("ring", rank, comm, q_all, k_all, v_all, grad_all, True, 8)

    _run_threads(world, body)
    assert calls == {f"rank{r}": r + 1 for r in range(world)}


def test_saves_only_operands_output_and_logsumexp():
    """What the forward keeps for the backward: q, k, v (Ulysses: head-sharded, the same element
    count), o and a float32 log-sum-exp per query row; nothing the size of a score matrix."""
    from syncopate.ops import ring_attention, ulysses_attention

    z, h, h_kv, s, d = 1, 4, 2, 32, 16
    q, k, v, _ = _global(3, z=z, h=h, h_kv=h_kv, n=s, d=d)
    for fn in (ulysses_attention, ring_attention):
        saved = []

        def pack(t):
            saved.append((t.dtype, t.numel()))
            return t

        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(*leaves, causal=True)
        expected = sorted(
            [(torch.float32, z * h * s * d)] * 2
            + [(torch.float32, z * h_kv * s * d)] * 2
            + [(torch.float32, z * h * s)]
        )
        assert sorted(saved) == expected, f"{fn.__name__}: {saved}"


def test_grad_of_only_some_operands():
    from syncopate.ops import ring_attention

    q, k, v, grad_o = _global(4)
    ref = _reference(q, k, v, grad_o, False)
    kk = k.clone().requires_grad_()
    o = ring_attention(q, kk, v)
    o.backward(grad_o)
    _close(kk.grad, ref[2], "dk with q, v constants")


@pytest.mark.parametrize("kind", ["ulysses", "ring"])
def test_gradients_under_torch_compile(kind):
    """Inside a compiled region the op runs eagerly (a graph break) and its gradients are SDPA's;
    traced by dynamo its Function's backward gave zero gradients, silently."""
    from syncopate.ops import ring_attention, ulysses_attention

    fn = ulysses_attention if kind == "ulysses" else ring_attention
    q, k, v, grad_o = _global(7)
    ref = _reference(q, k, v, grad_o, True)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    compiled = torch.compile(lambda q, k, v: (fn(q, k, v, causal=True) * grad_o).sum(), backend="aot_eager")
    compiled(*leaves).backward()
    for name, t, want in zip(("dq", "dk", "dv"), leaves, ref[1:]):
        _close(t.grad, want, f"{kind} compiled {name}")


def test_refusals_name_the_problem():
    from syncopate.errors import UserError
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v, _ = _global(5)
    qg = q.clone().requires_grad_()
    for fn in (ulysses_attention, ring_attention):
        with pytest.raises(UserError, match=f"{fn.__name__}: mode='fused' has no backward"):
            fn(qg, k, v, mode="fused")
    with pytest.raises(UserError, match="ulysses_attention: compute='triton' has no backward"):
        ulysses_attention(q, k, v.clone().requires_grad_(), compute="triton")
    # Without autograd recording, the forward-only paths as before: the fused form refuses fp32 ...
    with torch.no_grad():
        with pytest.raises(UserError, match="dtype torch.float32 is not supported by the fused kernel"):
            ulysses_attention(qg, k, v, mode="fused")
    # ... and mode='auto' under autograd runs the sequential form with its backward.
    o = ulysses_attention(qg, k, v, causal=True)
    assert o.grad_fn is not None and "UlyssesFunction" in type(o.grad_fn).__name__


def check_gradients_at_two_ranks(rank, world):
    """Run by test_seq_attention_ops.py's two gloo processes (one spawn for forward and backward):
    both ops' o, dq, dk, dv at this rank against SDPA's on the gathered sequence; raises if not."""
    from syncopate.ops import ring_attention, ulysses_attention

    s_loc = 8
    q_all, k_all, v_all, grad_all = _global(6, h=4, h_kv=2, n=world * s_loc)
    rows = slice(rank * s_loc, (rank + 1) * s_loc)
    for causal in (False, True):
        ref = _reference(q_all, k_all, v_all, grad_all, causal)
        for fn in (ulysses_attention, ring_attention):
            leaves = [t[:, :, rows].clone().requires_grad_() for t in (q_all, k_all, v_all)]
            o = fn(*leaves, causal=causal)
            o.backward(grad_all[:, :, rows])
            for name, got, want in zip(("o", "dq", "dk", "dv"), (o.detach(), *(t.grad for t in leaves)), ref):
                _close(got, want[:, :, rows], f"{fn.__name__} backward causal={causal} rank {rank} {name}")
