// What every importer turns its format into before it becomes a CommPlan (internal to the plan
// layer): per rank, lanes (a thread block, a stream) of ordered actions. build_imported_plan
// (import_build.cpp) pairs the actions, makes the chunks and their deps, and picks streams.
//
// The meaning of an action, shared by every format:
//  - the actions of a lane run one after the other; an action starts once the previous one of
//    its lane is *complete* and every action it names in `after` is complete (and, for a wait,
//    its signal was raised; for a barrier, every other member arrived);
//  - send / recv: a two-sided transfer. The k-th send from rank a to rank b on `channel` is
//    received by the k-th recv on b from a on that channel; the pair is one chunk (copy, or
//    reduce-add when the recv says so). A recv is complete when the chunk has landed; a send
//    when it started (its data sits in the connection, as in MSCCL: the lane goes on at once);
//  - put / get: a one-sided chunk to or from `peer` (push, pull), complete once landed;
//  - local: a chunk on this rank (src == dst), complete once landed;
//  - signal / wait: the k-th signal from a to b on `channel` releases the k-th wait on b from a
//    on that channel; what was complete on a's lane at its signal is complete for b's lane
//    after the wait;
//  - barrier: the members (one action per lane, `barrier` names the others) all wait until
//    every member's lane reached it;
//  - nop: an ordering point only.
// "after" on a chunk action waits for that chunk to land, so depending on a send waits for its
// data to arrive (the IR has no "read done" event; waiting longer is safe).
#pragma once

#include <string>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/import.hpp"

namespace syncopate::plan::import_detail {

struct Place {
  std::string tensor;
  Box box;
};

struct ActionRef {
  int rank = 0;
  int lane = 0;
  int index = 0;
  friend bool operator==(const ActionRef&, const ActionRef&) = default;
};

enum class ActionKind { send, recv, put, get, local, signal, wait, barrier, nop };

struct Action {
  ActionKind kind = ActionKind::nop;
  std::string element;             // "file:12: algo/gpu[1]/tb[0]/step[3]": where the source says this
  int peer = -1;                   // send, recv, put, get, signal, wait
  int channel = 0;                 // send/recv and signal/wait pair per (from, to, channel)
  Place place;                     // send: what leaves; recv: where it lands; put/get: the local side; local: source
  Place other;                     // put: where it lands on peer; get: what it reads on peer; local: destination
  ChunkOp op = ChunkOp::copy;      // recv, put, get, local
  std::vector<ActionRef> after;    // same rank
  std::vector<ActionRef> barrier;  // barrier: the other members
};

struct Lane {
  std::vector<Action> actions;
  // Lanes of one group (>= 0) prefer to share a stream when the source orders them one after
  // the other (see assign_streams); -1: no preference.
  int group = -1;
};

struct SourceProgram {
  CommPlan header;                       // version, collective, world_size, tensors
  std::vector<std::vector<Lane>> lanes;  // by rank
  std::vector<std::string> notes;
};

ImportedPlan build_imported_plan(SourceProgram program, const ImportOptions& options);

// Each format's reader (import_msccl_xml.cpp, import_mscclpp_json.cpp, import_sendrecv.cpp).
SourceProgram read_msccl_xml(std::string_view text, const ImportOptions& options);
SourceProgram read_mscclpp_json(std::string_view text, const ImportOptions& options);
SourceProgram read_sendrecv(std::string_view text, const ImportOptions& options);

}  // namespace syncopate::plan::import_detail

namespace syncopate::plan::import_detail {

// import_streams.cpp: the issuing (rank, lane) of each chunk -> the plan's streams. Chunks keep
// their lane's order; a chunk whose lane predecessor ends a stream continues it; the first chunk
// of a lane whose dep is the last chunk of a stream of its rank and of its lane's group
// continues that stream (no order is added: it waited for that chunk anyway). Then deps that
// stream order or other deps already imply are dropped. `plan.chunks` (with deps) must be
// filled and `plan.ranks` empty.
struct Issuer {
  int rank = 0;
  int lane = 0;
  int group = -1;
};
void assign_streams(CommPlan& plan, const std::vector<Issuer>& issuer_of_chunk);

// "<source>: <element>: <why>" as a PlanParseError.
[[noreturn]] void refuse(std::string_view source, std::string_view element, std::string_view why);

}  // namespace syncopate::plan::import_detail
