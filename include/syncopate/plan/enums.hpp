// Enumerations of the plan IR and their one and only spelling table.
//
// Every enum has exactly one table mapping values to their JSON/CLI spelling; parsing and
// printing both read it, so the two can never drift apart (mscclpp kept two lists in sync by
// comment, and they drifted).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace syncopate::plan {

enum class DType : std::uint8_t { f32, f16, bf16, f8e4m3, f8e5m2, i8, i32, i64 };
enum class Backend : std::uint8_t { copy_engine, sm_copy, nccl };
enum class ChunkOp : std::uint8_t { copy, reduce_add };
enum class Collective : std::uint8_t { all_gather, reduce_scatter, all_reduce, all_to_all, custom };
enum class Algorithm : std::uint8_t { ring, direct, bidir };

template <class E>
struct EnumTable;  // specialised below: static constexpr std::array<std::pair<E, std::string_view>, N> entries

template <>
struct EnumTable<DType> {
  static constexpr std::string_view kind = "dtype";
  static constexpr std::array<std::pair<DType, std::string_view>, 8> entries{{{DType::f32, "f32"},
                                                                              {DType::f16, "f16"},
                                                                              {DType::bf16, "bf16"},
                                                                              {DType::f8e4m3, "f8e4m3"},
                                                                              {DType::f8e5m2, "f8e5m2"},
                                                                              {DType::i8, "i8"},
                                                                              {DType::i32, "i32"},
                                                                              {DType::i64, "i64"}}};
};
template <>
struct EnumTable<Backend> {
  static constexpr std::string_view kind = "backend";
  static constexpr std::array<std::pair<Backend, std::string_view>, 3> entries{
      {{Backend::copy_engine, "copy-engine"}, {Backend::sm_copy, "sm-copy"}, {Backend::nccl, "nccl"}}};
};
template <>
struct EnumTable<ChunkOp> {
  static constexpr std::string_view kind = "op";
  static constexpr std::array<std::pair<ChunkOp, std::string_view>, 2> entries{
      {{ChunkOp::copy, "copy"}, {ChunkOp::reduce_add, "reduce-add"}}};
};
template <>
struct EnumTable<Collective> {
  static constexpr std::string_view kind = "collective";
  static constexpr std::array<std::pair<Collective, std::string_view>, 5> entries{
      {{Collective::all_gather, "all-gather"},
       {Collective::reduce_scatter, "reduce-scatter"},
       {Collective::all_reduce, "all-reduce"},
       {Collective::all_to_all, "all-to-all"},
       {Collective::custom, "custom"}}};
};
template <>
struct EnumTable<Algorithm> {
  static constexpr std::string_view kind = "algorithm";
  static constexpr std::array<std::pair<Algorithm, std::string_view>, 3> entries{
      {{Algorithm::ring, "ring"}, {Algorithm::direct, "direct"}, {Algorithm::bidir, "bidir"}}};
};

template <class E>
constexpr std::string_view to_string(E value) {
  for (const auto& [v, name] : EnumTable<E>::entries)
    if (v == value) return name;
  return "?";
}

template <class E>
constexpr std::optional<E> parse_enum(std::string_view name) {
  for (const auto& [v, n] : EnumTable<E>::entries)
    if (n == name) return v;
  return std::nullopt;
}

// "copy-engine, sm-copy, nccl": for error messages that list what is accepted.
template <class E>
std::string enum_choices() {
  std::string out;
  for (const auto& [v, n] : EnumTable<E>::entries) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::f8e4m3:
      return 1;
    case DType::f8e5m2:
      return 1;
    case DType::i8:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  return 0;
}

}  // namespace syncopate::plan
