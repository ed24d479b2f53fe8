"""Which ranks of a process group share a node (host): the topology a multi-node plan needs
(CommPlan.nodes: one node id per rank; [] for a single node).

Where it comes from, first match wins:
  1. the context's `nodes=` keyword: a node count (that many nodes of consecutive ranks, as
     torchrun numbers them) or one node id per rank of the group;
  2. SYNCOPATE_NODES: the same two forms over the global ranks ("2", or "0,0,1,1"), for tests
     and for launchers that do not set torchrun's variables;
  3. torchrun's LOCAL_WORLD_SIZE: global rank g is on node g // LOCAL_WORLD_SIZE (torchrun gives
     each node LOCAL_WORLD_SIZE consecutive ranks);
  4. otherwise every rank is on one node.
Nothing here touches a GPU or torch.distributed; `group_nodes` only asks the group for its
global ranks.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from syncopate.errors import UserError
from syncopate.settings import env

NodesArg = Union[None, int, Sequence[int]]


def _consecutive(count: int, world: int, what: str) -> list:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UserError(f"{what}: a node count must be an integer >= 1, got {count!r}")
    if world % count != 0:
        raise UserError(
            f"{what}: {count} nodes cannot hold {world} ranks in equal parts "
            "(give one node id per rank for uneven nodes)"
        )
    per_node = world // count
    return [r // per_node for r in range(world)]


def _per_rank(ids: Sequence[int], world: int, what: str) -> list:
    out = list(ids)
    if len(out) != world:
        raise UserError(f"{what}: {len(out)} node ids for {world} ranks: give one per rank")
    for r, node in enumerate(out):
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise UserError(f"{what}: rank {r} has node {node!r}; node ids are integers >= 0")
    return out


def _parse_env_nodes(text: str, world: int) -> list:
    what = f"SYNCOPATE_NODES={text!r}"
    text = text.strip()
    try:
        numbers = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"{what}: expected a node count (\"2\") or one node id per global rank (\"0,0,1,1\")") from None
    if "," in text:
        return _per_rank(numbers, world, what)
    return _consecutive(numbers[0], world, what)


def _local_world_size(environ: Mapping[str, str]) -> Optional[int]:
    text = environ.get("LOCAL_WORLD_SIZE")
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"LOCAL_WORLD_SIZE={text!r}: expected a positive integer (set by torchrun)") from None
    if value < 1:
        raise UserError(f"LOCAL_WORLD_SIZE={text!r}: expected a positive integer (set by torchrun)")
    return value


def _compact(nodes: Sequence[int]) -> list:
    """[] when every rank is on one node (the single-node plan), else the ids as given."""
    return [] if len(set(nodes)) <= 1 else list(nodes)


def _settings_environ() -> dict:
    """The variables detect_nodes reads, as syncopate.settings reads them (unset ones left out)."""
    values = {"WORLD_SIZE": env.world_size, "SYNCOPATE_NODES": env.nodes, "LOCAL_WORLD_SIZE": env.local_world_size}
    return {name: value for name, value in values.items() if value is not None}


def detect_nodes(
    global_ranks: Sequence[int], *, nodes: NodesArg = None, environ: Optional[Mapping[str, str]] = None
) -> list:
    """The node id of each rank of a group whose ranks are `global_ranks` (group rank i is global
    rank global_ranks[i]); [] when all share one node. `nodes` is the context's keyword (module
    docstring); `environ` (WORLD_SIZE, SYNCOPATE_NODES, LOCAL_WORLD_SIZE) defaults to those of
    syncopate.settings. Raises UserError naming the source of a bad value."""
    world = len(global_ranks)
    if nodes is not None:
        if isinstance(nodes, int) and not isinstance(nodes, bool):
            return _compact(_consecutive(nodes, world, f"nodes={nodes}"))
        return _compact(_per_rank(nodes, world, f"nodes={list(nodes)!r}"))
    environ = _settings_environ() if environ is None else environ
    global_world = int(environ.get("WORLD_SIZE", "0") or 0) or (max(global_ranks) + 1 if world else 0)
    text = environ.get("SYNCOPATE_NODES")
    if text:
        by_global = _parse_env_nodes(text, global_world)
        return _compact([by_global[g] for g in global_ranks])
    local = _local_world_size(environ)
    if local is not None:
        if global_world % local != 0:
            raise UserError(
                f"LOCAL_WORLD_SIZE={local} does not divide WORLD_SIZE={global_world}: torchrun "
                "with a different number of processes per node; set SYNCOPATE_NODES to one node id "
                "per global rank"
            )
        return _compact([g // local for g in global_ranks])
    return []


def group_nodes(group, *, nodes: NodesArg = None, environ: Optional[Mapping[str, str]] = None) -> list:
    """detect_nodes for a torch.distributed process group (None: a single rank, one node)."""
    if group is None:
        return [] if nodes is None else detect_nodes([0], nodes=nodes, environ=environ)
    import torch.distributed as dist

    return detect_nodes(dist.get_process_group_ranks(group), nodes=nodes, environ=environ)


def node_count(nodes: Sequence[int]) -> int:
    return max(1, len(set(nodes)))


def check_single_node(who: str, nodes: Sequence[int]) -> None:
    """The op contexts run on one node only for now: their plans come from single-node templates
    and their calls map every peer's heap through CUDA IPC. Refuses a multi-node group by name
    (instead of failing inside CUDA when a peer's handle cannot be opened)."""
    if node_count(nodes) <= 1:
        return
    counts = {}
    for node in nodes:
        counts[node] = counts.get(node, 0) + 1
    layout = ", ".join(f"node {n}: {c} ranks" for n, c in sorted(counts.items()))
    raise UserError(
        f"{who}: the group spans {node_count(nodes)} nodes ({layout}); the fused ops run within "
        "one node so far (docs/RUNTIME.md, \"Multi-node\": hierarchical plans, the heap and the "
        "executor support several nodes, the op contexts do not choose such plans yet). Use a "
        "group of one node's ranks, or torch.distributed across nodes"
    )
