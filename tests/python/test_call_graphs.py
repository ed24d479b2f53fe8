"""ops/call_graphs.py on the CPU: which calls replay a graph, which are captured into the caller's
graph, which run eagerly, and the refusal of a context that cannot be captured. CUDA graphs are
stood in for by fakes that record what was enqueued during capture and re-run it on replay, so
the bookkeeping (one capture per set of operand addresses, replays after it, eviction of the
least recently used) is checked without a GPU."""

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import UserError  # noqa: E402
from syncopate.ops import call_graphs  # noqa: E402


class FakeGraphs:
    """torch.cuda.CUDAGraph / torch.cuda.graph / the runtime launch, recording into a log."""

    def __init__(self, monkeypatch):
        self.capturing = False
        self.log = []
        self.guarded = 0  # guarded replays asked of the runtime (the fast path's one call)
        fake = self

        class Graph:
            def __init__(self):
                self.work = None

            def raw_cuda_graph_exec(self):
                return id(self)

        class Capture:
            def __init__(self, graph, stream=None, capture_error_mode=None):
                self.graph = graph
                assert capture_error_mode == "thread_local"

            def __enter__(self):
                fake.capturing = True
                fake.log.append("capture")

            def __exit__(self, *exc):
                fake.capturing = False

        class Launch:
            def launch_graph(self, handle, stream):
                fake.log.append(("launch", handle, stream))

            def replay_graph_unless(self, handle, stream, monitor, flag):
                """runtime/graph_launch.hpp's guarded replay: launches unless the stream is being
                captured or the watched records show a timeout; True if it launched."""
                fake.guarded += 1
                if fake.capturing:
                    return False
                if (monitor is not None and monitor.timed_out) or (flag is not None and flag.value != 0):
                    return False
                fake.log.append(("launch", handle, stream))
                return True

            def launch_split_graph(self, head, tail, side, done, tail_records_done, stream):
                fake.log.append(("launch", head, stream))

            def replay_split_graph_unless(self, head, tail, side, done, tail_records_done, stream, monitor, flag):
                """replay_graph_unless for a call captured as a head and a tail graph."""
                fake.guarded += 1
                if fake.capturing or (monitor is not None and monitor.timed_out) or (flag is not None and flag.value):
                    return False
                fake.log.append(("launch", head, stream))
                return True

        class Stream:  # the side stream of split graphs (test_split_graphs.py tests their order)
            cuda_stream = 900

            def __init__(self, device=None, priority=0):
                pass

            @staticmethod
            def priority_range():
                return (0, -5)

            def wait_event(self, event):
                pass

            def wait_stream(self, stream):
                pass

        class Event:
            cuda_event = 800

            def __init__(self, external=False):
                pass

            def record(self, stream=None):
                pass

        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", Capture)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        self.queries = 0  # capture-status queries (each costs host time on a GPU)

        def is_capturing():
            fake.queries += 1
            return fake.capturing

        def no_stream_objects(*_):
            # A capture may ask for its stream (the split graphs' head branches off it); a replay
            # must not.
            if fake.capturing:
                return Stream()
            raise AssertionError("a replay must not build a torch.cuda.Stream (host time per call)")

        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", is_capturing)
        monkeypatch.setattr(torch.cuda, "current_stream", no_stream_objects)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 700 + device, raising=False)
        import syncopate.runtime as rt

        monkeypatch.setattr(rt, "require_runtime", lambda: Launch())

    def enqueue(self, tag):
        return lambda: self.log.append(("enqueue", tag, "captured" if self.capturing else "eager"))


def test_the_first_call_per_address_set_runs_eagerly_and_is_captured_the_rest_replay(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True)
    assert graphs.mode == "graph"
    for _ in range(3):
        graphs.run((1, 2, 3), fake.enqueue("a"))
    graphs.run((4, 2, 3), fake.enqueue("b"))
    graphs.run((1, 2, 3), fake.enqueue("a"))
    enqueued = [e for e in fake.log if e[0] == "enqueue"]
    # First use of an address set: the call itself eagerly (lazy initialisation outside any
    # capture), then its capture for the next calls.
    assert enqueued == [
        ("enqueue", "a", "eager"),
        ("enqueue", "a", "captured"),
        ("enqueue", "b", "eager"),
        ("enqueue", "b", "captured"),
    ]
    assert graphs.captures == 2
    launches = [e for e in fake.log if e[0] == "launch"]
    assert len(launches) == 3 and launches[0] == launches[1] == launches[2]


def test_the_least_recently_used_graph_goes_first(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("GemmRs", enabled=True, limit=2)
    for key in ((1,), (2,), (1,), (3,), (1,), (2,)):
        graphs.run(key, fake.enqueue(key))
    # (2,) was evicted by (3,) (the least recently used then), so it is captured again.
    assert [e[1] for e in fake.log if e[0] == "enqueue" and e[2] == "captured"] == [(1,), (2,), (3,), (2,)]


def test_inside_the_callers_capture_the_work_is_recorded_into_it(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("GemmAr", enabled=True)
    fake.capturing = True  # the caller's torch.cuda.graph
    graphs.run((1,), fake.enqueue("user"))
    assert fake.log == [("enqueue", "user", "captured")] and graphs.captures == 0


def test_eager_contexts_enqueue_every_call(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("AgGemm", enabled=False)
    assert graphs.mode == "eager"
    graphs.run((1,), fake.enqueue("x"))
    graphs.run((1,), fake.enqueue("x"))
    assert fake.log == [("enqueue", "x", "eager")] * 2


def test_a_context_that_cannot_be_captured_runs_eagerly_and_refuses_a_capture_by_name(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    why = "its plan moves chunks with NCCL"
    graphs = call_graphs.CallGraphs("GemmRs", enabled=True, refusal=why)
    assert graphs.mode == "eager"
    graphs.run((1,), fake.enqueue("x"))
    assert fake.log == [("enqueue", "x", "eager")]
    fake.capturing = True
    with pytest.raises(
        UserError, match=r"^GemmRs: cannot be captured in a CUDA graph: its plan moves chunks with NCCL"
    ):
        graphs.run((1,), fake.enqueue("x"))
    assert len(fake.log) == 1, "nothing may be enqueued into a capture that would replay wrongly"


def test_a_replay_asks_for_the_capture_status_once_and_launches_on_the_captured_devices_raw_stream(monkeypatch):
    """The host time of a call: a replay makes one capture-status query (none when the caller
    passes the answer it already has) and reads the stream as a raw handle of the device the
    graph was captured on (FakeGraphs refuses to build a torch.cuda.Stream)."""
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True)
    graphs.run((1,), fake.enqueue("a"))  # eager, then captured on device 3
    fake.queries = 0
    graphs.run((1,), fake.enqueue("a"))
    assert fake.queries == 1
    graphs.run((1,), fake.enqueue("a"), under_capture=False)
    assert fake.queries == 1
    launches = [e for e in fake.log if e[0] == "launch"]
    assert len(launches) == 2 and all(stream == 703 for _, _, stream in launches)


def test_a_call_under_the_callers_capture_named_by_the_caller_is_recorded_without_a_query(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("GemmRs", enabled=True)
    fake.capturing = True
    graphs.run((1,), fake.enqueue("user"), under_capture=True)
    assert fake.log == [("enqueue", "user", "captured")] and fake.queries == 0


class Watched:
    """What the guarded replay watches: the runtime's WaitMonitor (`timed_out`) and the kernel's
    HostFlag (`value`), as the bindings expose them."""

    def __init__(self):
        self.timed_out = False
        self.value = 0

    def clear(self):  # HostFlag.clear
        self.value = 0


def test_replay_cached_launches_a_known_key_and_declines_anything_else_without_launching(monkeypatch):
    fake = FakeGraphs(monkeypatch)
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True, limit=2)
    monitor, flag = Watched(), Watched()
    assert not graphs.replay_cached((1,), monitor, flag) and fake.guarded == 0  # no graph: no runtime call
    graphs.run((1,), fake.enqueue("a"))
    graphs.run((2,), fake.enqueue("b"))
    launches = lambda: [e for e in fake.log if e[0] == "launch"]  # noqa: E731
    assert graphs.replay_cached((1,), monitor, flag) and len(launches()) == 1
    assert fake.queries == 2, "the fast path asks torch nothing: the runtime call reads the capture status"
    # (1,) is now the most recently used: a third key evicts (2,).
    graphs.run((3,), fake.enqueue("c"))
    assert not graphs.replay_cached((2,), monitor, flag)
    for watched in (monitor, flag):  # an earlier timeout: nothing launched, the full path raises it
        if watched is monitor:
            monitor.timed_out = True
        else:
            flag.value = 1
        assert not graphs.replay_cached((1,), monitor, flag)
        monitor.timed_out, flag.value = False, 0
    fake.capturing = True  # the caller's capture: nothing launched, the full path records into it
    assert not graphs.replay_cached((1,), monitor, flag)
    fake.capturing = False
    assert len(launches()) == 1
    assert graphs.replay_cached((1,), None, None) and len(launches()) == 2


def test_an_eager_fused_call_holds_garbage_collection_off_from_its_launch_to_the_chunks_issue():
    """call_graphs.collection_held: a collection between the kernel's launch and issue_chunks
    could run a cudaFree, which waits for a kernel that waits for those chunks."""
    import gc

    seen = []

    class Workspace:
        def fork(self):
            seen.append(("fork", gc.isenabled()))

        def issue_chunks(self):
            seen.append(("issue_chunks", gc.isenabled()))

        def end(self):
            seen.append(("end", gc.isenabled()))

    call = call_graphs.FusedCall(
        Workspace(), lambda: seen.append(("start", gc.isenabled())), lambda: seen.append(("launch", gc.isenabled()))
    )
    assert gc.isenabled()
    call()
    assert seen == [("start", True), ("fork", True), ("launch", False), ("issue_chunks", False), ("end", True)]
    assert gc.isenabled()

    def failing_launch():
        raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError, match="launch failed"):
        call_graphs.FusedCall(Workspace(), lambda: None, failing_launch)()
    assert gc.isenabled(), "turned back on after a failure"
    gc.disable()
    try:
        call()
        assert not gc.isenabled(), "left off for a caller that had it off"
    finally:
        gc.enable()
