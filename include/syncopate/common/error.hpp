// Error classes shared by every layer.
//
// Two kinds, as in Halide: a UserError means the input was wrong (a malformed plan, an
// unannotated kernel, mismatched shapes) and its message names the place (file:line:col or a
// JSON path), the rank and chunk where relevant, and the rule that was broken. An InternalError
// means Syncopate itself is wrong. The Python bindings map each class to its own exception.
#pragma once

#include <stdexcept>
#include <string>

namespace syncopate {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user. Message format: "<where>: <rule>: <detail>".
class UserError : public Error {
 public:
  using Error::Error;
};

// A plan that cannot be read (JSON syntax, missing field, wrong type); names the JSON path.
class PlanParseError : public UserError {
 public:
  using UserError::UserError;
};

// A plan that reads fine but breaks a verifier rule; the message lists every violation.
class PlanVerifyError : public UserError {
 public:
  using UserError::UserError;
};

// Template or shape arguments that cannot make a plan (e.g. a dimension too small to split).
class ShapeError : public UserError {
 public:
  using UserError::UserError;
};

// A kernel source the transformer cannot rewrite; names file:line:col and the annotation.
class TransformError : public UserError {
 public:
  using UserError::UserError;
};

// A simulator calibration that cannot be read or holds an impossible number; names the JSON path.
class CalibrationError : public UserError {
 public:
  using UserError::UserError;
};

// A device-side wait ran past its bound; names rank, slot, expected/seen and the chunk.
class WaitTimeoutError : public Error {
 public:
  using Error::Error;
};

// CUDA / NCCL / driver failures at run time.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// A bug in Syncopate: an invariant that valid input cannot break.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace syncopate
