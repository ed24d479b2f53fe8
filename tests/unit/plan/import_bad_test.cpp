// Malformed or inexpressible inputs, per format: each case edits one of the hand-written plans
// (tests/unit/plan/import_good/) and expects a refusal of the right kind whose message names
// the element and the reason. The last cases of each format are plans the importer maps but
// the verifier rejects (a missing chunk, a cycle): their violations name the source element.
#include <functional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/import.hpp"
#include "text_edits.hpp"

namespace syncopate::plan {
namespace {

using test_edits::Edit;
using test_edits::edit_json;
using test_edits::read_good;
using test_edits::replace;

enum class Refusal { parse, shape, verify };

struct BadCase {
  std::string name;
  std::string base;  // a file of import_good/<format>/
  std::vector<std::int64_t> shape;
  Edit edit;
  Refusal refusal;
  std::vector<std::string> expect;  // each must appear in the message
};

void check(ImportFormat format, const BadCase& c) {
  SCOPED_TRACE(c.name);
  std::string text = read_good(std::string(to_string(format)), c.base);
  c.edit(text);
  ImportOptions o;
  o.source = c.base;
  o.shape = c.shape;
  std::string message;
  Refusal got = Refusal::parse;
  try {
    import_plan(text, format, o);
    ADD_FAILURE() << c.name << ": accepted";
    return;
  } catch (const PlanParseError& e) {
    message = e.what();
  } catch (const ShapeError& e) {
    got = Refusal::shape;
    message = e.what();
  } catch (const PlanVerifyError& e) {
    got = Refusal::verify;
    message = e.what();
  }
  EXPECT_EQ(got, c.refusal) << message;
  EXPECT_EQ(message.rfind(c.base + ":", 0), 0u) << "names the file first: " << message;
  for (const auto& want : c.expect) EXPECT_NE(message.find(want), std::string::npos) << want << "\nin: " << message;
}

// ---------------------------------------------------------------------------- MSCCL XML

const std::vector<int64_t> kRing{8, 3};

std::vector<BadCase> msccl_cases() {
  const std::string ring = "ring_allgather.xml", ar = "two_step_allreduce.xml";
  return {
      {"syntax", ring, kRing, replace("</algo>", "</algx>"), Refusal::parse, {":", "XML syntax"}},
      {"root",
       ring,
       kRing,
       [](std::string& t) {
         replace("<algo ", "<algorithm ")(t);
         replace("</algo>", "</algorithm>")(t);
       },
       Refusal::parse,
       {"algorithm (line 3)", "one <algo> element"}},
      {"unknown attribute",
       ring,
       kRing,
       replace("proto=\"Simple\"", "protocol=\"Simple\""),
       Refusal::parse,
       {"algo (line 3)", "unknown attribute \"protocol\""}},
      {"collective",
       ring,
       kRing,
       replace("coll=\"allgather\"", "coll=\"broadcast\""),
       Refusal::parse,
       {"algo (line 3)", "\"broadcast\" has no counterpart"}},
      {"chunks per rank",
       ring,
       kRing,
       replace("nchunksperloop=\"4\"", "nchunksperloop=\"6\""),
       Refusal::parse,
       {"algo (line 3)", "6 chunks per loop do not divide among 4 GPUs"}},
      {"gpu twice",
       ring,
       kRing,
       replace("<gpu id=\"1\"", "<gpu id=\"0\""),
       Refusal::parse,
       {"algo/gpu[1] (line 12)", "id 0 is given twice"}},
      {"peer",
       ring,
       kRing,
       replace("send=\"1\" recv=\"3\"", "send=\"7\" recv=\"3\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0] (line 5)", "peer 7 is neither -1 nor another GPU"}},
      {"step type",
       ring,
       kRing,
       replace("type=\"s\"", "type=\"x\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[0] (line 6)", "type=\"x\" is not an MSCCL step type"}},
      {"step number",
       ring,
       kRing,
       replace("<step s=\"1\"", "<step s=\"5\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[1] (line 7)", "s=\"5\" but this is step 1"}},
      {"offset",
       ring,
       kRing,
       replace("srcbuf=\"i\" srcoff=\"0\"", "srcbuf=\"i\" srcoff=\"1\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[0]", "GPU 0 declares 1 input chunks"}},
      {"buffer",
       ring,
       kRing,
       replace("srcbuf=\"i\"", "srcbuf=\"q\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[0]", "srcbuf=\"q\" names no buffer"}},
      {"integer",
       ring,
       kRing,
       replace("cnt=\"1\"", "cnt=\"one\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[0]", "cnt=\"one\" is not an integer"}},
      {"dependency target",
       ring,
       kRing,
       replace("depid=\"-1\" deps=\"-1\"", "depid=\"3\" deps=\"0\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[0]", "names no step of GPU 0"}},
      {"hasdep",
       "hierarchical_allgather.xml",
       {4, 2},
       replace("hasdep=\"1\"", "hasdep=\"0\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[2]", "would never signal it"}},
      {"unmatched send",
       ring,
       kRing,
       replace("<step s=\"3\" type=\"r\" srcbuf=\"o\" srcoff=\"2\"",
               "<step s=\"3\" type=\"nop\" srcbuf=\"o\" srcoff=\"2\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[2]", "send number 3 from rank 0 to rank 1 on channel 0 has no matching receive"}},
      {"extents",
       ring,
       kRing,
       replace("type=\"r\" srcbuf=\"o\" srcoff=\"2\" dstbuf=\"o\" dstoff=\"2\" cnt=\"1\"",
               "type=\"r\" srcbuf=\"o\" srcoff=\"2\" dstbuf=\"o\" dstoff=\"2\" cnt=\"2\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[2]", "moves a box of extents [2, 3] into one of extents [4, 3]"}},
      {"rrc operand",
       ar,
       {4, 2},
       replace("type=\"rrc\" srcbuf=\"i\" srcoff=\"0\"", "type=\"rrc\" srcbuf=\"i\" srcoff=\"1\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[1]", "name different chunks"}},
      {"new op format",
       ring,
       kRing,
       replace("<step s=\"0\"", "<op s=\"0\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[0]/step[0]", "old_format=True"}},
      {"in-place alltoall",
       "alltoall.xml",
       {3, 2},
       replace("inplace=\"0\"", "inplace=\"1\""),
       Refusal::parse,
       {"algo (line 3)", "in-place alltoall"}},
      {"two thread blocks, one connection",
       ar,
       {4, 2},
       replace("send=\"2\" recv=\"2\"", "send=\"1\" recv=\"2\""),
       Refusal::parse,
       {"algo/gpu[0]/tb[1]", "a second thread block sends to GPU 1 on channel 0"}},
      {"shape", ring, {7, 3}, [](std::string&) {}, Refusal::shape, {"not a multiple of the 4 chunks per loop"}},
      // Source plans that are wrong: the verifier's violations name the steps.
      {"missing chunk",
       ar,
       {4, 2},
       [](std::string& t) {
         replace("<step s=\"3\" type=\"r\" srcbuf=\"i\" srcoff=\"1\"",
                 "<step s=\"3\" type=\"nop\" srcbuf=\"i\" srcoff=\"1\"")(t);
         replace(
             "<step s=\"2\" type=\"s\" srcbuf=\"i\" srcoff=\"1\" dstbuf=\"i\" dstoff=\"1\" cnt=\"1\" depid=\"-1\"",
             "<step s=\"2\" type=\"nop\" srcbuf=\"i\" srcoff=\"1\" dstbuf=\"i\" dstoff=\"1\" cnt=\"1\" depid=\"-1\"")(
             t);
       },
       Refusal::verify,
       {"coverage/", "comes from algo/gpu["}},
      {"cycle",
       ring,
       {2, 3},
       // Two GPUs that each receive before they send: each waits for the other.
       [](std::string& t) {
         t = "<algo name=\"x\" nchunksperloop=\"2\" ngpus=\"2\" coll=\"allgather\" inplace=\"1\">\n";
         for (int r = 0; r < 2; ++r)
           t += fmt::format(
               "<gpu id=\"{0}\" i_chunks=\"1\" o_chunks=\"2\" s_chunks=\"0\"><tb id=\"0\" send=\"{1}\" recv=\"{1}\" "
               "chan=\"0\">\n"
               "<step s=\"0\" type=\"r\" dstbuf=\"o\" dstoff=\"{1}\" cnt=\"1\"/>\n"
               "<step s=\"1\" type=\"s\" srcbuf=\"i\" srcoff=\"0\" cnt=\"1\"/>\n</tb></gpu>\n",
               r, 1 - r);
         t += "</algo>\n";
       },
       Refusal::verify,
       {"deadlock/dependency-cycle", "comes from algo/gpu["}},
  };
}

TEST(ImportBadMsccl, EachIsRefusedWithElementAndReason) {
  const auto cases = msccl_cases();
  EXPECT_GE(cases.size(), 15u);
  for (const auto& c : cases) check(ImportFormat::msccl_xml, c);
}

// ---------------------------------------------------------------------------- MSCCL++ JSON

std::vector<BadCase> mscclpp_cases() {
  const std::string ring = "ring_allgather.json", ar = "two_step_allreduce.json";
  const std::vector<std::int64_t> ring_shape{8, 2}, ar_shape{2, 4};
  const std::string first_put =
      "{\"name\": \"put\", \"src_buff\": [{\"type\": \"o\", \"index\": 0, \"size\": 1}], \"dst_buff\": "
      "[{\"buffer_id\": "
      "0, \"index\": 0, \"size\": 1}], \"channel_type\": \"memory\"}";
  const std::string op0 = "gpus[0].threadblocks[0].ops[0]";
  return {
      {"syntax",
       ring,
       ring_shape,
       [](std::string& t) {
         t.pop_back();
         t.pop_back();
       },
       Refusal::parse,
       {"JSON syntax"}},
      {"unknown key",
       ring,
       ring_shape,
       replace("\"protocol\"", "\"protocl\""),
       Refusal::parse,
       {"protocl", "unknown key"}},
      {"packets",
       ring,
       ring_shape,
       replace("\"protocol\": \"Simple\"", "\"protocol\": \"LL\""),
       Refusal::parse,
       {"protocol: protocol \"LL\": packets"}},
      {"collective",
       ring,
       ring_shape,
       replace("\"collective\": \"allgather\"", "\"collective\": \"broadcast\""),
       Refusal::parse,
       {"collective: collective \"broadcast\" has no counterpart"}},
      {"gpu id",
       ring,
       ring_shape,
       replace("\"id\": 1,\n   \"input_chunks\"", "\"id\": 2,\n   \"input_chunks\""),
       Refusal::parse,
       {"gpus[1].id", "1 (gpus[k] has id k)"}},
      {"packet op",
       ring,
       ring_shape,
       replace("\"name\": \"put\"", "\"name\": \"ppkt\""),
       Refusal::parse,
       {op0, "packet operations synchronise through flags"}},
      {"pipeline",
       ring,
       ring_shape,
       replace("\"name\": \"put\"", "\"name\": \"pipeline\""),
       Refusal::parse,
       {op0, "pipelined loops"}},
      {"nvls",
       ring,
       ring_shape,
       replace("\"name\": \"put\"", "\"name\": \"glres\""),
       Refusal::parse,
       {op0, "NVLS multimem"}},
      {"thread block group",
       ring,
       ring_shape,
       replace("{\"name\": \"put\", ", "{\"name\": \"put\", \"tbg_info\": {\"tb_id\": 0, \"tbg_size\": 2}, "),
       Refusal::parse,
       {op0, "thread block groups"}},
      {"reduce op",
       ar,
       ar_shape,
       replace("\"reduce_op\": \"sum\"", "\"reduce_op\": \"max\""),
       Refusal::parse,
       {"gpus[0].threadblocks[0].ops[2]", "the IR's reductions add"}},
      {"channel index",
       ring,
       ring_shape,
       replace("\"name\": \"signal\", \"channel_ids\": [0]", "\"name\": \"signal\", \"channel_ids\": [5]"),
       Refusal::parse,
       {"gpus[0].threadblocks[0].ops[1].channel_ids[0]", "channels of this kind (2)"}},
      {"remote buffer",
       ring,
       ring_shape,
       replace("{\"buffer_id\": 0,", "{\"buffer_id\": 3,"),
       Refusal::parse,
       {"gpus[0].threadblocks[0].ops[0].dst_buff[0].buffer_id", "remote buffers (1)"}},
      {"chunk index",
       ring,
       ring_shape,
       replace("{\"type\": \"o\", \"index\": 0", "{\"type\": \"o\", \"index\": 9"),
       Refusal::parse,
       {op0, "GPU 0 declares 4 output chunks"}},
      {"switch channel",
       ring,
       ring_shape,
       replace("\"channel_type\": \"memory\", \"connected_to\"", "\"channel_type\": \"switch\", \"connected_to\""),
       Refusal::parse,
       {"gpus[0].channels[0].channel_type", "NVLS switch channels"}},
      {"unmatched wait",
       ring,
       ring_shape,
       replace("\"name\": \"signal\"", "\"name\": \"nop\""),
       Refusal::parse,
       {"gpus[1].threadblocks[0].ops[8]", "wait number 3 on rank 1 from rank 0", "has no matching signal"}},
      {"semaphores",
       ring,
       ring_shape,
       replace("\"semaphores\": []", "\"semaphores\": [{\"init_value\": 0}]"),
       Refusal::parse,
       {"gpus[0].semaphores", "no semaphores"}},
      {"waits first",
       ar,
       ar_shape,
       // On both GPUs: wait for the peer before signalling it.
       edit_json([](nlohmann::json& j) {
         for (auto& gpu : j["gpus"]) {
           auto& ops = gpu["threadblocks"][0]["ops"];
           std::swap(ops[0], ops[1]);
         }
       }),
       Refusal::parse,
       {"dependency-cycle: the source's own orderings wait on each other"}},
      {"local destination of a put",
       ring,
       ring_shape,
       replace("\"dst_buff\": [{\"buffer_id\": 0,", "\"dst_buff\": [{\"type\": \"o\","),
       Refusal::parse,
       {op0, "a local buffer where a remote one belongs"}},
      {"barrier",
       ring,
       ring_shape,
       replace(first_put, "{\"name\": \"barrier\", \"barrier_id\": 0, \"num_threadblocks\": 2}, " + first_put),
       Refusal::parse,
       {op0, "barrier 0 of GPU 0 is met by 1 thread blocks", "never open"}},
      {"in-place alltoall",
       "alltoall.json",
       {3, 2},
       replace("\"inplace\": false", "\"inplace\": true"),
       Refusal::parse,
       {"inplace: an in-place alltoall"}},
      {"missing chunk",
       ring,
       ring_shape,
       replace(first_put, "{\"name\": \"nop\"}"),
       Refusal::verify,
       {"coverage/", "comes from gpus["}},
  };
}

TEST(ImportBadMscclpp, EachIsRefusedWithElementAndReason) {
  const auto cases = mscclpp_cases();
  EXPECT_GE(cases.size(), 15u);
  for (const auto& c : cases) check(ImportFormat::mscclpp_json, c);
}

// ---------------------------------------------------------------------------- send/recv

std::vector<BadCase> sendrecv_cases() {
  const std::string ring = "ring_allgather.json";
  const std::string item0 = "ranks[0].streams[0][0]";
  return {
      {"syntax", ring, {}, replace("\"ranks\": [", "\"ranks\": [["), Refusal::parse, {"JSON syntax"}},
      {"format",
       ring,
       {},
       replace("\"syncopate-sendrecv\"", "\"sendrecv\""),
       Refusal::parse,
       {"format: expected \"syncopate-sendrecv\""}},
      {"version",
       ring,
       {},
       replace("\"version\": 1", "\"version\": 2"),
       Refusal::parse,
       {"version: expected version 1"}},
      {"missing key", ring, {}, replace("\"world_size\"", "\"world\""), Refusal::parse, {"world_size", "missing"}},
      {"collective",
       ring,
       {},
       replace("\"all-gather\"", "\"gather\""),
       Refusal::parse,
       {"collective.kind: expected one of all-gather"}},
      {"tensor",
       ring,
       {},
       replace("\"tensor\": \"x\"", "\"tensor\": \"z\""),
       Refusal::parse,
       {"collective.tensor: expected the name of a tensor"}},
      {"rank count",
       ring,
       {},
       replace("\"world_size\": 4", "\"world_size\": 5"),
       Refusal::parse,
       {"ranks: expected one entry per rank (5)"}},
      {"rank order",
       ring,
       {},
       replace("{\"rank\": 1,", "{\"rank\": 2,"),
       Refusal::parse,
       {"ranks[1].rank: expected 1 (ranks are listed in order)"}},
      {"two kinds",
       ring,
       {},
       replace("{\"send\": 1, \"box\"", "{\"send\": 1, \"recv\": 2, \"box\""),
       Refusal::parse,
       {item0, "exactly one of"}},
      {"box dims",
       ring,
       {},
       replace("\"box\": [[0, 1], [0, 2]]", "\"box\": [[0, 1]]"),
       Refusal::parse,
       {item0 + ".box", "one [begin, end] pair per dimension"}},
      {"box bounds",
       ring,
       {},
       replace("\"box\": [[0, 1], [0, 2]]", "\"box\": [[0, 1], [0, 3]]"),
       Refusal::parse,
       {item0 + ".box[1]", "0 <= begin < end <= 2"}},
      {"peer",
       ring,
       {},
       replace("{\"send\": 1,", "{\"send\": 9,"),
       Refusal::parse,
       {item0, "peer 9 is not another rank of 0..3"}},
      {"reduce on a send",
       ring,
       {},
       replace("{\"send\": 1, \"box\": [[0, 1], [0, 2]]}",
               "{\"send\": 1, \"box\": [[0, 1], [0, 2]], \"reduce\": true}"),
       Refusal::parse,
       {item0 + ".reduce", "no \"reduce\" on a send"}},
      {"after",
       "hierarchical_allgather.json",
       {},
       replace("\"after\": [[0, 1]]", "\"after\": [[0, 5]]"),
       Refusal::parse,
       {"ranks[0].streams[1][0].after[0]", "[stream, index] of an item of this rank"}},
      {"unmatched send",
       ring,
       {},
       replace("{\"recv\": 0, \"box\": [[2, 3], [0, 2]]}", "{\"copy\": [[2, 3], [0, 2]], \"to\": [[2, 3], [0, 2]]}"),
       Refusal::parse,
       {"ranks[0].streams[0][4]", "send number 3 from rank 0 to rank 1", "no matching receive"}},
      {"extents",
       ring,
       {},
       replace("{\"recv\": 0, \"box\": [[0, 1], [0, 2]]}", "{\"recv\": 0, \"box\": [[0, 2], [0, 2]]}"),
       Refusal::parse,
       {item0, "moves a box of extents [1, 2] into one of extents [2, 2]"}},
      {"unknown item key",
       ring,
       {},
       replace("{\"send\": 1, \"box\"", "{\"send\": 1, \"boxx\": 0, \"box\""),
       Refusal::parse,
       {item0 + ".boxx", "unknown key"}},
      {"dtype", ring, {}, replace("\"bf16\"", "\"bf17\""), Refusal::parse, {"tensors.x.dtype", "expected one of f32"}},
      {"one connection, two streams",
       "hierarchical_allgather.json",
       {},
       replace("{\"send\": 2, \"box\": [[0, 2], [0, 2]]", "{\"send\": 1, \"box\": [[0, 2], [0, 2]]"),
       Refusal::parse,
       {"ranks[0].streams[1][0]", "use one connection from two lanes"}},
      {"options",
       ring,
       {4, 2},
       [](std::string&) {},
       Refusal::shape,
       {"names its tensors, shapes, dtypes and dim itself"}},
      {"cycle",
       ring,
       {},
       // Every rank receives before it sends its own chunk.
       edit_json([](nlohmann::json& j) {
         for (auto& rank : j["ranks"]) std::swap(rank["streams"][0][0], rank["streams"][0][1]);
       }),
       Refusal::verify,
       {"deadlock/dependency-cycle", "comes from ranks["}},
      {"missing chunk",
       ring,
       {},
       // Rank 1 never receives chunk 0, yet forwards it.
       edit_json([](nlohmann::json& j) {
         auto& s0 = j["ranks"][0]["streams"][0];
         s0.erase(s0.begin());
         auto& s1 = j["ranks"][1]["streams"][0];
         s1.erase(s1.begin() + 1);
       }),
       Refusal::verify,
       {"coverage/", "comes from ranks["}},
  };
}

TEST(ImportBadSendRecv, EachIsRefusedWithElementAndReason) {
  const auto cases = sendrecv_cases();
  EXPECT_GE(cases.size(), 15u);
  for (const auto& c : cases) check(ImportFormat::sendrecv, c);
}

TEST(ImportOptions, NcclIsRefusedByName) {
  ImportOptions o;
  o.backend = Backend::nccl;
  o.source = "ring.json";
  try {
    import_plan(read_good("sendrecv", "ring_allgather.json"), ImportFormat::sendrecv, o);
    FAIL() << "accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("backend nccl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace syncopate::plan
