// The send/recv list format (Syncopate's own; docs/IMPORT.md) -> SourceProgram.
//
//   {"format": "syncopate-sendrecv", "version": 1, "world_size": 2,
//    "collective": {"kind": "all-gather", "tensor": "x", "dim": 0},
//    "tensors": {"x": {"shape": [4, 8], "dtype": "bf16"}},
//    "ranks": [{"rank": 0, "streams": [[{"send": 1, "box": [[0, 2], [0, 8]]},
//                                       {"recv": 1, "box": [[2, 4], [0, 8]]}]]}, ...]}
//
// Each rank lists streams of items run in order: {"send": peer, "box": B}, {"recv": peer,
// "box": B, "reduce": true|false}, or a local {"copy": B, "to": B2, "reduce": ...}; any item may
// name "tensor" (and a copy "to_tensor"; default: the collective's tensor) and "after": [[stream,
// index], ...] (items of the same rank that must be complete first). A box is [[begin, end),
// ...] per dimension. The k-th send from a to b is received by the k-th recv on b from a.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "import_model.hpp"
#include "json_checked.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::plan::import_detail {
namespace {

using detail::as_enum;
using detail::JsonNode;
using detail::ObjectReader;

constexpr std::string_view kFormat = "syncopate-sendrecv";
constexpr int kVersion = 1;

class SendRecvReader {
 public:
  SendRecvReader(std::string_view text, const ImportOptions& o) : text_(text), o_(o) {}

  SourceProgram read() {
    if (!o_.shape.empty() || o_.tensor != "x" || o_.output != "y" || o_.scratch != "scratch" || o_.dim != 0 || o_.dtype)
      throw ShapeError(
          fmt::format("{}: a send/recv list names its tensors, shapes, dtypes and dim itself; the tensor, "
                      "shape, dtype, dim and scratch options do not apply to it",
                      o_.source));
    const nlohmann::json doc = detail::parse_json_source(text_, o_.source);
    const JsonNode root(doc, "", o_.source);
    ObjectReader top(root, "send/recv list", {"format", "version", "world_size", "collective", "tensors", "ranks"});
    const JsonNode format = top.required("format");
    if (format.as_string() != kFormat) format.fail(fmt::format("\"{}\"", kFormat));
    const JsonNode version = top.required("version");
    if (version.as_int() != kVersion) version.fail(fmt::format("version {}", kVersion));
    SourceProgram program;
    CommPlan& h = program.header;
    h.world_size = top.required("world_size").as_int();
    if (h.world_size < 1 || h.world_size > 1024) top.required("world_size").fail("a world size in 1..1024");
    read_collective(top.required("collective"), h.collective);
    for (const auto& [name, value] : top.required("tensors").value().items()) {
      const JsonNode node = top.required("tensors").child(name);
      ObjectReader fields(node, "tensor", {"shape", "dtype"});
      TensorSpec spec{fields.required("shape").as_int64_list(), as_enum<DType>(fields.required("dtype")), "row-major"};
      fields.finish();
      for (auto s : spec.shape)
        if (s < 1) fields.required("shape").fail("sizes >= 1");
      h.tensors[name] = std::move(spec);
    }
    if (!h.tensors.count(h.collective.tensor))
      top.required("collective").child("tensor").fail("the name of a tensor listed under \"tensors\"");
    const auto ranks = top.required("ranks").elements();
    if (static_cast<int>(ranks.size()) != h.world_size)
      top.required("ranks").fail(fmt::format("one entry per rank ({})", h.world_size));
    program.lanes.resize(ranks.size());
    for (std::size_t r = 0; r < ranks.size(); ++r) read_rank(ranks[r], static_cast<int>(r), program);
    top.finish();
    return program;
  }

 private:
  void read_collective(const JsonNode& node, CollectiveSpec& spec) {
    ObjectReader fields(node, "collective", {"kind", "tensor", "output", "dim"});
    spec.kind = as_enum<Collective>(fields.required("kind"));
    spec.tensor = fields.required("tensor").as_string();
    if (auto v = fields.optional("output")) spec.output = v->as_string();
    if (auto v = fields.optional("dim")) spec.dim = v->as_int();
    fields.finish();
  }

  Place read_place(const JsonNode& box_node, std::optional<JsonNode> tensor_node, const CommPlan& h) {
    Place p;
    p.tensor = tensor_node ? tensor_node->as_string() : h.collective.tensor;
    const auto it = h.tensors.find(p.tensor);
    if (it == h.tensors.end()) tensor_node->fail("the name of a tensor listed under \"tensors\"");
    const auto& shape = it->second.shape;
    const auto dims = box_node.elements();
    if (dims.size() != shape.size())
      box_node.fail(fmt::format("one [begin, end] pair per dimension of {} ({})", p.tensor, shape.size()));
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const auto range = dims[d].as_int64_list();
      if (range.size() != 2 || range[0] < 0 || range[0] >= range[1] || range[1] > shape[d])
        dims[d].fail(fmt::format("[begin, end] with 0 <= begin < end <= {} (dim {} of {})", shape[d], d, p.tensor));
      p.box.offset.push_back(range[0]);
      p.box.extent.push_back(range[1] - range[0]);
    }
    return p;
  }

  void read_rank(const JsonNode& node, int r, SourceProgram& program) {
    ObjectReader fields(node, "rank", {"rank", "streams"});
    const JsonNode rank = fields.required("rank");
    if (rank.as_int() != r) rank.fail(fmt::format("{} (ranks are listed in order)", r));
    const auto streams = fields.required("streams").elements();
    fields.finish();
    auto& lanes = program.lanes[r];
    lanes.resize(streams.size());
    for (std::size_t s = 0; s < streams.size(); ++s) lanes[s].group = static_cast<int>(s);
    for (std::size_t s = 0; s < streams.size(); ++s)
      for (const JsonNode& item : streams[s].elements())
        lanes[s].actions.push_back(read_item(item, r, streams, program));
  }

  Action read_item(const JsonNode& node, int r, const std::vector<JsonNode>& streams, const SourceProgram& program) {
    ObjectReader f(node, "item", {"send", "recv", "copy", "to", "box", "tensor", "to_tensor", "reduce", "after"});
    const auto send = f.optional("send"), recv = f.optional("recv"), copy = f.optional("copy");
    if ((send ? 1 : 0) + (recv ? 1 : 0) + (copy ? 1 : 0) != 1)
      node.fail("an item with exactly one of \"send\", \"recv\" and \"copy\"");
    Action a;
    a.element = node.path();
    bool reduce = false;
    if (auto v = f.optional("reduce")) {
      if (!v->value().is_boolean()) v->fail("true or false");
      reduce = v->value().get<bool>();
      if (reduce && send) v->fail("no \"reduce\" on a send (the receiving item says how it lands)");
    }
    a.op = reduce ? ChunkOp::reduce_add : ChunkOp::copy;
    if (copy) {
      a.kind = ActionKind::local;
      a.place = read_place(*copy, f.optional("tensor"), program.header);
      a.other = read_place(f.required("to"), f.optional("to_tensor"), program.header);
      if (f.optional("box")) f.required("box").fail("no \"box\" on a copy (it has \"copy\" and \"to\")");
    } else {
      if (f.optional("to") || f.optional("to_tensor"))
        node.fail("\"to\" and \"to_tensor\" only on a copy (a send or recv names its own box)");
      a.kind = send ? ActionKind::send : ActionKind::recv;
      a.peer = (send ? *send : *recv).as_int();
      a.place = read_place(f.required("box"), f.optional("tensor"), program.header);
    }
    if (auto after = f.optional("after"))
      for (const JsonNode& ref : after->elements()) {
        const auto pair = ref.as_int_list();
        if (pair.size() != 2 || pair[0] < 0 || pair[0] >= static_cast<int>(streams.size()) || pair[1] < 0 ||
            pair[1] >= static_cast<int>(streams[pair[0]].value().size()))
          ref.fail("[stream, index] of an item of this rank");
        a.after.push_back({r, pair[0], pair[1]});
      }
    f.finish();
    return a;
  }

  std::string_view text_;
  const ImportOptions& o_;
};

}  // namespace

SourceProgram read_sendrecv(std::string_view text, const ImportOptions& options) {
  return SendRecvReader(text, options).read();
}

}  // namespace syncopate::plan::import_detail
