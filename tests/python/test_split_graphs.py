"""ops/call_graphs.py's split graphs on the CPU: a fused call (FusedCall) captured as a head graph
(the call's start and the kernel) and a tail graph (the chunks and the end, on a side stream),
and replayed by one runtime call that launches the head first.

CUDA is stood in for by fakes: a capture records each step with the stream it was enqueued on,
events record and wait, and a small scheduler replays the launched graphs stream by stream with
CUDA's ordering rules (in order per stream; a wait holds until the event's last record, as of
when the wait was enqueued, has run) and one rule of the fused ops: the kernel cannot finish
before the chunks have been issued (its tiles wait for them). So the tests see what the device
would: whether the kernel starts after only the head's start, whether the chunks run beside it
and after the call's start, whether the caller's stream waits for the whole call; and that the
one-graph form (split=False) keeps the old order (every step in one graph on one stream)."""

import pytest

torch = pytest.importorskip("torch")

from syncopate.ops import call_graphs  # noqa: E402
from syncopate.ops.call_graphs import FusedCall  # noqa: E402

HEAD_STEPS = ["start", "kernel"]
TAIL_STEPS = ["fork", "issue_chunks", "finish", "end", "flag_copy"]


class FakeCuda:
    """Graphs, streams and events that record what a capture enqueues, and a scheduler that
    replays launched work with CUDA's ordering (module docstring)."""

    def __init__(self, monkeypatch):
        fake = self
        self.current = "caller"  # the current stream's name
        self.capture = None  # the graph being captured, or None
        self.events = []
        self.launches = []  # what the runtime was asked to launch, in order
        self.queues = {}  # stream name -> [(op, arg, bound)] launched, in order (push)
        self.record_counts = {}  # event index -> records enqueued so far (push)

        class Graph:
            def __init__(self):
                self.ops = []  # (stream, op, arg)

            def raw_cuda_graph_exec(self):
                return id(self)

        class Capture:
            def __init__(self, graph, stream=None, capture_error_mode=None):
                assert capture_error_mode == "thread_local"
                self.graph, self.stream = graph, stream

            def __enter__(self):
                self.saved = fake.current
                fake.current = self.stream.name if self.stream is not None else "capture"
                fake.capture = self.graph

            def __exit__(self, *exc):
                fake.current, fake.capture = self.saved, None

        class Stream:
            def __init__(self, device=None, priority=0, name=None):
                self.name, self.priority = name or f"side{len(fake.queues)}", priority
                if name is None:
                    fake.queues[self.name] = []
                self.cuda_stream = 9000 + len(fake.queues)

            @staticmethod
            def priority_range():
                return (0, -5)

            def wait_event(self, event):
                fake.enqueue("wait", event, stream=self.name)

            def wait_stream(self, other):  # an internal event: record on `other`, wait on self
                event = Event()
                fake.enqueue("record", event, stream=other.name)
                fake.enqueue("wait", event, stream=self.name)

        class Event:
            def __init__(self, external=False):
                self.external = external
                self.index = len(fake.events)
                self.cuda_event = 5000 + self.index
                fake.events.append(self)

            def record(self, stream=None):
                fake.enqueue("record", self, stream=None if stream is None else stream.name)

        class Runtime:
            def launch_graph(self, handle, stream):
                fake.launch(("graph", handle, stream))

            def replay_graph_unless(self, handle, stream, monitor, flag):
                fake.launch(("graph", handle, stream))
                return True

            def launch_split_graph(self, head, tail, side, done, tail_records_done, stream):
                fake.launch(("split", head, tail, side, done, tail_records_done, stream))

            def replay_split_graph_unless(self, head, tail, side, done, tail_records_done, stream, monitor, flag):
                fake.launch(("split", head, tail, side, done, tail_records_done, stream))
                return True

        self.Graph, self.Stream, self.Event = Graph, Stream, Event
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", Capture)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: fake.capture is not None)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(name=fake.current))
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 700, raising=False)
        import syncopate.runtime as rt

        monkeypatch.setattr(rt, "require_runtime", lambda: Runtime())
        self.eager = []  # (stream, op, arg) enqueued outside any capture, in order

    def enqueue(self, op, arg=None, stream=None):
        entry = (stream or self.current, op, arg)
        (self.capture.ops if self.capture is not None else self.eager).append(entry)

    def step(self, name):
        return lambda: self.enqueue("step", name)

    def launch(self, what):
        self.launches.append(what)
        graphs = {id(g): g for g in self.graphs}
        if what[0] == "graph":
            for _, op, arg in graphs[what[1]].ops:
                self.push("caller", op, arg)
            return
        _, head, tail, side, done, tail_records_done, _ = what
        side_name = next(s.name for s in self.streams if s.cuda_stream == side)
        done_event = next(e for e in self.events if e.cuda_event == done)
        # The head on the caller's stream (its capture stream stands for it), the tail on the side
        # stream, the done event recorded there, the caller's stream waits for it.
        for stream, op, arg in graphs[head].ops:  # the capture stream is the caller's; a branch its own
            self.push("caller" if stream == "capture" else f"head-{stream}", op, arg)
        for _, op, arg in graphs[tail].ops:
            self.push(side_name, op, arg)
        if not tail_records_done:
            self.push(side_name, "record", done_event)
        self.push("caller", "wait", done_event)

    def push(self, stream, op, arg):
        """Enqueues on a stream as the device sees it: a wait is bound to the records of its event
        enqueued so far (cudaStreamWaitEvent's rule)."""
        counts = self.record_counts
        if op == "record":
            counts[arg.index] = counts.get(arg.index, 0) + 1
        bound = counts.get(arg.index, 0) if op == "wait" else None
        self.queues.setdefault(stream, []).append((op, arg, bound))

    def run(self):
        """Executes every queue (module docstring): returns the steps in the order they ran, or
        raises AssertionError on a deadlock."""
        ran, recorded = [], {}
        cursor = {name: 0 for name in self.queues}
        progress = True
        while progress:
            progress = False
            for name, ops in self.queues.items():
                while cursor[name] < len(ops):
                    op, arg, bound = ops[cursor[name]]
                    if op == "wait" and recorded.get(arg.index, 0) < bound:
                        break
                    if op == "step" and arg == "kernel":
                        last_start = len(ran) - 1 - ran[::-1].index("start")
                        if "issue_chunks" not in ran[last_start:]:
                            break  # the kernel's tiles wait for the chunks
                    if op == "record":
                        recorded[arg.index] = recorded.get(arg.index, 0) + 1
                    if op == "step":
                        ran.append(arg)
                    cursor[name] += 1
                    progress = True
        stuck = {name: ops[cursor[name]][:2] for name, ops in self.queues.items() if cursor[name] < len(ops)}
        assert not stuck, f"deadlock: {stuck}, ran {ran}"
        return ran

    @property
    def graphs(self):
        return [g for g in _created(self.Graph)]

    @property
    def streams(self):
        return [s for s in _created(self.Stream)]


_instances = {}


def _created(cls):
    return _instances.get(cls, [])


def _track(monkeypatch, cls):
    original = cls.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _instances.setdefault(cls, []).append(self)

    monkeypatch.setattr(cls, "__init__", init)


@pytest.fixture
def cuda(monkeypatch):
    _instances.clear()
    fake = FakeCuda(monkeypatch)
    _track(monkeypatch, fake.Graph)
    _track(monkeypatch, fake.Stream)
    return fake


class StepWorkspace:
    """The PlanWorkspace steps a FusedCall makes (fork, issue_chunks, end), logged as steps."""

    def __init__(self, fake):
        self.fork = fake.step("fork")
        self.issue_chunks = fake.step("issue_chunks")
        self.end = fake.step("end")


def fused_call(fake):
    return FusedCall(
        StepWorkspace(fake),
        fake.step("start"),
        fake.step("kernel"),
        finish=fake.step("finish"),
        after=fake.step("flag_copy"),
    )


def test_a_fused_call_enqueued_as_is_keeps_the_one_stream_order(cuda):
    fused_call(cuda)()
    assert cuda.eager == [
        ("caller", "step", s) for s in ("start", "fork", "kernel", "issue_chunks", "finish", "end", "flag_copy")
    ]


def test_the_head_holds_the_start_and_the_kernel_only_and_the_tail_waits_for_the_start(cuda):
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True, head_branch=False, tail_records_done=False)
    graphs.run((1,), fused_call(cuda))  # eager, then captured
    head, tail = cuda.graphs
    started, launched, done = cuda.events
    assert started.external and launched.external and not done.external
    assert [(op, arg) for _, op, arg in head.ops] == [
        ("step", "start"),
        ("record", started),
        ("step", "kernel"),
        ("record", launched),
    ]
    side = cuda.streams[0]
    assert side.priority == torch.cuda.Stream.priority_range()[1], "the tail's stream has the highest priority"
    assert all(stream == side.name for stream, _, _ in tail.ops)
    assert [(op, arg) for _, op, arg in tail.ops] == [
        ("wait", started),
        ("step", "fork"),
        ("step", "issue_chunks"),
        ("wait", launched),
        ("step", "finish"),
        ("step", "end"),
        ("step", "flag_copy"),
    ]


def test_a_replay_launches_the_head_first_and_the_device_order_holds_over_several_calls(cuda):
    graphs = call_graphs.CallGraphs("GemmRs", enabled=True, head_branch=False, tail_records_done=False)
    graphs.run((1,), fused_call(cuda))  # eager (not in the queues), then captured
    for _ in range(3):
        graphs.run((1,), fused_call(cuda))
        cuda.push("caller", "step", "next_user_op")
    head, tail = cuda.graphs
    side = cuda.streams[0]
    done = cuda.events[2].cuda_event
    assert cuda.launches == [("split", id(head), id(tail), side.cuda_stream, done, False, 700)] * 3
    ran = cuda.run()
    calls = []
    for _ in range(3):
        upto = ran.index("next_user_op")
        calls.append(ran[:upto])
        ran = ran[upto + 1 :]
    for steps in calls:  # each call, before the caller's next op on its stream
        assert sorted(steps) == sorted(HEAD_STEPS + TAIL_STEPS), steps
        assert steps.index("start") < steps.index("fork") < steps.index("issue_chunks")
        assert steps.index("kernel") < steps.index("finish") < steps.index("end") < steps.index("flag_copy")


def test_the_one_graph_form_is_the_old_order_and_the_simulated_device_sees_it_run(cuda):
    graphs = call_graphs.CallGraphs("GemmAr", enabled=True, split=False)
    graphs.run((1,), fused_call(cuda))
    (graph,) = cuda.graphs
    assert [arg for _, op, arg in graph.ops if op == "step"] == [
        "start",
        "fork",
        "kernel",
        "issue_chunks",
        "finish",
        "end",
        "flag_copy",
    ]
    assert cuda.events == [] and cuda.streams == []


def test_the_scheduler_sees_a_tail_queued_behind_the_kernel_deadlock(cuda):
    """The hazard the split design avoids, seen by the same scheduler: a tail launched on the
    caller's stream after the head (in order behind the kernel, which waits for its chunks)."""
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True)
    graphs.run((1,), fused_call(cuda))
    head, tail = cuda.graphs
    cuda.queues = {}
    for _, op, arg in head.ops + tail.ops:
        cuda.push("caller", op, arg)
    with pytest.raises(AssertionError, match="deadlock"):
        cuda.run()


def test_a_caller_capture_records_the_fused_call_in_one_stream_order(cuda):
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True)
    cuda.capture = cuda.Graph()  # the caller's torch.cuda.graph
    user = cuda.capture
    graphs.run((1,), fused_call(cuda))
    assert [arg for _, op, arg in user.ops if op == "step"] == [
        "start",
        "fork",
        "kernel",
        "issue_chunks",
        "finish",
        "end",
        "flag_copy",
    ]
    assert graphs.captures == 0 and cuda.events == []


def test_a_head_with_the_start_event_on_a_branch_lets_the_kernel_follow_the_start_alone(cuda):
    """head_branch (the default): the event the tail waits for is recorded on a second capture
    stream beside the kernel; the device order still holds and nothing deadlocks."""
    graphs = call_graphs.CallGraphs("AgGemm", enabled=True, head_branch=True, tail_records_done=False)
    graphs.run((1,), fused_call(cuda))
    head, tail = cuda.graphs
    started = cuda.events[0]
    on_capture = [(op, arg) for stream, op, arg in head.ops if stream == "capture"]
    assert ("record", started) not in on_capture
    steps = [arg for op, arg in on_capture if op == "step"]
    assert steps == ["start", "kernel"]
    between = on_capture[on_capture.index(("step", "start")) + 1 : on_capture.index(("step", "kernel"))]
    assert all(op == "record" and not arg.external for op, arg in between), "the kernel waits for nothing"
    branch = [(op, arg) for stream, op, arg in head.ops if stream != "capture"]
    assert ("record", started) in branch and branch[0][0] == "wait"
    assert on_capture[-1][0] == "wait", "the branch rejoins the capture stream"
    for _ in range(3):
        graphs.run((1,), fused_call(cuda))
        cuda.push("caller", "step", "next_user_op")
    ran = cuda.run()
    for _ in range(3):
        upto = ran.index("next_user_op")
        steps, ran = ran[:upto], ran[upto + 1 :]
        assert sorted(steps) == sorted(HEAD_STEPS + TAIL_STEPS), steps
        assert steps.index("start") < steps.index("fork") and steps.index("kernel") < steps.index("end")


def test_a_tail_that_records_the_done_event_itself_still_holds_the_callers_stream(cuda):
    """tail_records_done (the default: one host call less per replay): the event the caller's
    stream waits for is the tail's last node; the order holds as with the host's record."""
    graphs = call_graphs.CallGraphs("GemmRs", enabled=True, head_branch=False, tail_records_done=True)
    graphs.run((1,), fused_call(cuda))
    head, tail = cuda.graphs
    done = cuda.events[2]
    assert done.external and tail.ops[-1][1:] == ("record", done)
    for _ in range(3):
        graphs.run((1,), fused_call(cuda))
        cuda.push("caller", "step", "next_user_op")
    assert all(launch[5] is True for launch in cuda.launches)
    side = cuda.streams[0].name
    assert [arg for op, arg, _ in cuda.queues[side] if op == "record"].count(done) == 3, "one record per tail"
    ran = cuda.run()
    for _ in range(3):
        upto = ran.index("next_user_op")
        steps, ran = ran[:upto], ran[upto + 1 :]
        assert sorted(steps) == sorted(HEAD_STEPS + TAIL_STEPS), steps


def test_the_default_form_branches_the_start_event_and_the_tail_records_done(cuda):
    """The measured default (CallGraphs' docstring): both variants on; over several calls every
    step runs once per call, the chunks after the start, the end after the kernel, and the
    caller's next work after the whole call."""
    graphs = call_graphs.CallGraphs("GemmAr", enabled=True)
    assert graphs.split and graphs.head_branch and graphs.tail_records_done
    graphs.run((1,), fused_call(cuda))
    head, tail = cuda.graphs
    started, _, done = cuda.events[:3]
    assert ("record", started) not in [(op, arg) for stream, op, arg in head.ops if stream == "capture"]
    assert done.external and tail.ops[-1][1:] == ("record", done)
    for _ in range(3):
        graphs.run((1,), fused_call(cuda))
        cuda.push("caller", "step", "next_user_op")
    ran = cuda.run()
    for _ in range(3):
        upto = ran.index("next_user_op")
        steps, ran = ran[:upto], ran[upto + 1 :]
        assert sorted(steps) == sorted(HEAD_STEPS + TAIL_STEPS), steps
        assert steps.index("start") < steps.index("fork") and steps.index("kernel") < steps.index("end")
